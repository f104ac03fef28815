"""`make test`'s grouping (conftest.py): under pytest-xdist --dist loadgroup every test carries its group in its
node id. Tests that share a module-scoped fixture (or the shared launch, or the Slurm cluster) are kept on one
worker; every other test is a group of its own, so independent launches of one module run side by side."""
import os

import pytest

from conftest import group_names


def test_a_test_without_module_fixtures_runs_in_a_group_of_its_own_under_xdist(request):
    if "PYTEST_XDIST_WORKER" not in os.environ or not request.config.getoption("loadgroup", False):
        pytest.skip("only `make test` (pytest-xdist, --dist loadgroup) groups tests")
    assert request.node.nodeid.endswith(f"@{request.node.nodeid.split('@')[0]}"), request.node.nodeid


def test_tests_sharing_a_module_fixture_share_a_group_and_the_rest_stand_alone():
    m = "tests/test_m.py"
    names = group_names([
        (f"{m}::a", {"reference", "tmp_path"}, {"reference"}),
        (f"{m}::b", {"victim", "reference"}, {"victim", "reference"}),   # victim is built on reference
        (f"{m}::c", {"other"}, {"other"}),
        (f"{m}::d", {"tmp_path"}, set()),
        (f"{m}::e[1]", set(), set()),
        ("tests/test_n.py::f", {"shared_runs"}, set()),
        ("tests/test_n.py::g", set(), set()),                         # its module reads the shared launch
        ("tests/cluster/test_multinode.py::h", set(), set()),
        ("tests/cluster/test_multinode.py::i", {"bed"}, {"bed"}),
    ])
    assert names == {
        f"{m}::a": f"{m}::reference+victim", f"{m}::b": f"{m}::reference+victim", f"{m}::c": f"{m}::other",
        f"{m}::d": f"{m}::d", f"{m}::e[1]": f"{m}::e[1]",
        "tests/test_n.py::f": "shared-runs", "tests/test_n.py::g": "shared-runs",
        # the bed's module is one group with the local Slurm cluster's: the two clusters never run side by side
        "tests/cluster/test_multinode.py::h": "slurm-cluster", "tests/cluster/test_multinode.py::i": "slurm-cluster",
    }


def test_the_longest_groups_exist_and_are_queued_first(request):
    """conftest's LONGEST_FIRST entries each name one group that exists (a renamed module or test would silently
    lose its place) and the session's items start with those groups, in that order: what xdist's queue follows
    under --no-loadscope-reorder."""
    from conftest import LONGEST_FIRST

    order = list(dict.fromkeys(item.get_closest_marker("xdist_group").args[0] for item in request.session.items))
    collected = {item.nodeid.split("::")[0] for item in request.session.items}
    modules = {entry.split("::")[0] for entry in LONGEST_FIRST if ".py" in entry}   # the others name shared groups
    if len(order) <= len(LONGEST_FIRST) or not modules <= collected:
        pytest.skip("only with the whole suite collected")
    for entry in LONGEST_FIRST:
        matching = [group for group in order if group == entry or group.startswith(entry)]
        assert len(matching) == 1, (entry, matching)
    first = order[:len(LONGEST_FIRST)]
    assert all(group == entry or group.startswith(entry) for group, entry in zip(first, LONGEST_FIRST)), first
