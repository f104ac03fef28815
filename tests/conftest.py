import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def shared_runs(tmp_path_factory):
    """{name: run folder} of every run declared with shared_runs.declare, made in one launch (tests/shared_runs.py)."""
    from shared_runs import launch_all

    return launch_all(tmp_path_factory.mktemp("shared-runs"))


# `make test` runs the suite on 3 pytest-xdist workers with --dist loadgroup. A worker builds its own session and
# module fixtures, so tests that share one are kept on one worker: a module is a group of its own, every module that
# reads the shared launch is one group (one launch per session), and every module that uses the local Slurm
# cluster is one group (one cluster per node: slurmctld's ports and state folder are fixed).
SHARED_GROUPS = {"shared_runs": "shared-runs", "slurm_cluster": "slurm-cluster"}


# tryfirst: xdist's worker turns the marks into the `@group` suffix its scheduler reads in its own
# pytest_collection_modifyitems; run after it, these marks came too late and every test was its own unit (shared
# fixtures were built on both workers, module fixtures again whenever a module's tests were split up).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    group_of_module: dict[str, str] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        for fixture, group in SHARED_GROUPS.items():
            if fixture in getattr(item, "fixturenames", ()):
                group_of_module[module] = group
    group = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        group[item.nodeid] = group_of_module.get(module, module)
        item.add_marker(pytest.mark.xdist_group(group[item.nodeid]))
    items.sort(key=lambda item: start_order(group[item.nodeid]))   # stable: a group's tests keep their order


# A worker takes the next group from one queue in collection order (the Makefile turns off xdist's own order, by the
# number of tests in a group): the groups that take longest start first, so that the suite does not end with one
# worker still in a long group while the others idle. Worker-seconds per group from `make test
# PYTEST_ARGS=--durations=0` on 2 cores, 3 workers (before refused launches stopped importing torch, which shortened
# test_failures and the Slurm groups most); every other group comes after these, in collection order.
LONGEST_FIRST = (
    "tests/test_multinode.py",          # 360: one bed, 10 launches across nodes (Slurm and mpirun)
    "tests/test_failures.py",           # 582: ~30 launches, most refused on purpose
    "tests/test_crossdevice_mpi.py",    # 286: two tests
    "slurm-cluster",                    # 289
    "shared-runs",                      # 271
    "tests/test_checkpoint.py",         # 221
    "tests/test_fv_run.py",             # 177
    "tests/test_run_e2e.py",            # 124
    "tests/test_reproduce.py",          # 116
    "tests/test_protocols_e2e.py",      # 81
    "tests/test_crossdevice_robust.py",  # 67
    "tests/test_bad_records.py",        # 63
)


def start_order(group: str) -> int:
    return LONGEST_FIRST.index(group) if group in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_configure(config):
    config.addinivalue_line("markers", "xdist_group(name): tests a pytest-xdist worker runs together (conftest)")
