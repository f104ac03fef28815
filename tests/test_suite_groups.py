"""`make test`'s grouping (conftest.py): under pytest-xdist --dist loadgroup every test carries its group in its
node id, which is what keeps a module's tests, and the modules sharing a launch or the Slurm cluster, on one worker."""
import os

import pytest


def test_a_test_runs_in_its_modules_group_under_xdist(request):
    if "PYTEST_XDIST_WORKER" not in os.environ or not request.config.getoption("loadgroup", False):
        pytest.skip("only `make test` (pytest-xdist, --dist loadgroup) groups tests")
    assert request.node.nodeid.endswith("@tests/test_suite_groups.py"), request.node.nodeid


def test_the_longest_groups_exist_and_are_queued_first(request):
    """conftest's LONGEST_FIRST names groups that exist (a renamed module would silently lose its place) and the
    session's items start with them, in that order: what xdist's queue follows under --no-loadscope-reorder."""
    from conftest import LONGEST_FIRST

    order = list(dict.fromkeys(item.get_closest_marker("xdist_group").args[0] for item in request.session.items))
    if len(order) <= len(LONGEST_FIRST):
        pytest.skip("only with the whole suite collected")
    assert order[:len(LONGEST_FIRST)] == list(LONGEST_FIRST)
