"""`make test`'s grouping (conftest.py): under pytest-xdist --dist loadgroup every test carries its group in its
node id, which is what keeps a module's tests, and the modules sharing a launch or the Slurm cluster, on one worker."""
import os

import pytest


def test_a_test_runs_in_its_modules_group_under_xdist(request):
    if "PYTEST_XDIST_WORKER" not in os.environ or not request.config.getoption("loadgroup", False):
        pytest.skip("only `make test` (pytest-xdist, --dist loadgroup) groups tests")
    assert request.node.nodeid.endswith("@tests/test_suite_groups.py"), request.node.nodeid
