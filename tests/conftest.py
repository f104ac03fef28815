import sys
from pathlib import Path

import pytest

# The tests are grouped by what they need: unit/ (one process), mpi/ (launches under mpirun), cluster/ (Slurm,
# submitit, the multi-node bed); support/ holds the harnesses, fixtures and the scripts the launches run. Helpers
# and tests import each other by module name, wherever they live.
TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS.parent))
for folder in ("cluster", "mpi", "unit", "support"):
    sys.path.insert(0, str(TESTS / folder))


@pytest.fixture(scope="session")
def shared_runs(tmp_path_factory):
    """{name: run folder} of every run declared with shared_runs.declare, made in one launch (tests/support/shared_runs.py)."""
    from shared_runs import launch_all

    return launch_all(tmp_path_factory.mktemp("shared-runs"))


# `make test` runs the suite on 3 pytest-xdist workers with --dist loadgroup. A worker builds its own session and
# module fixtures, so tests that share one are kept on one worker: the tests of a module that share one of its
# module-scoped fixtures form one group, every module that reads the shared launch is one group (one launch per
# session), every module that uses the local Slurm cluster is one group (one cluster per node: slurmctld's ports and
# state folder are fixed), and every other test is a group of its own, so that independent launches run side by side.
SHARED_GROUPS = {"shared_runs": "shared-runs", "slurm_cluster": "slurm-cluster"}
# Modules kept whole, as one group: the multi-node bed's tests make network namespaces, bridges and addresses of fixed
# names, and run their own Slurm cluster, which must not start beside the local one (a slurmd of the bed found its
# port taken while the local cluster ran).
WHOLE_MODULES = {"tests/cluster/test_multinode.py": "slurm-cluster"}


def module_fixtures(item) -> set[str]:
    """The fixtures of wider than function scope, defined in the test's own module, that the test uses."""
    module = item.nodeid.split("::")[0]
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    return {name for name, defs in info.name2fixturedefs.items()
            if defs and defs[-1].scope != "function" and defs[-1].baseid == module}


def group_names(tests: list[tuple[str, set[str], set[str]]]) -> dict[str, str]:
    """{node id: group} for tests given as (node id, fixture names used, own-module fixtures used): the shared
    groups by module, the modules kept whole, then the tests of a module linked by a module fixture (transitively),
    then each alone."""
    shared = {}
    for nodeid, fixtures, _ in tests:
        for fixture, group in SHARED_GROUPS.items():
            if fixture in fixtures:
                shared[nodeid.split("::")[0]] = group
    parent: dict[tuple[str, str], tuple[str, str]] = {}

    def root(key):
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    for nodeid, _, own in tests:
        module = nodeid.split("::")[0]
        keys = [root((module, name)) for name in sorted(own)]
        for key in keys[1:]:
            parent[key] = keys[0]
    members: dict[tuple[str, str], set[str]] = {}
    for key in list(parent):
        members.setdefault(root(key), set()).add(key[1])
    names = {}
    for nodeid, _, own in tests:
        module = nodeid.split("::")[0]
        if module in shared:
            names[nodeid] = shared[module]
        elif module in WHOLE_MODULES:
            names[nodeid] = WHOLE_MODULES[module]
        elif own:
            names[nodeid] = f"{module}::" + "+".join(sorted(members[root((module, min(own)))]))
        else:
            names[nodeid] = nodeid
    return names


# tryfirst: xdist's worker turns the marks into the `@group` suffix its scheduler reads in its own
# pytest_collection_modifyitems; run after it, these marks come too late and every test is its own unit (shared
# fixtures would be built on several workers).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    group = group_names([(item.nodeid, set(getattr(item, "fixturenames", ())), module_fixtures(item))
                         for item in items])
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group[item.nodeid]))
    items.sort(key=lambda item: start_order(group[item.nodeid]))   # stable: a group's tests keep their order


# A worker takes the next group from one queue in collection order (the Makefile turns off xdist's own order, by the
# number of tests in a group): the groups that take longest start first, so that the suite does not end with one
# worker still in a long group while the others idle. An entry names a group or the start of its name (a test's
# node id); worker-seconds from `make test PYTEST_ARGS=--durations=80` on 2 cores, 3 workers (the test's own share
# of the loaded cores, not its time alone); every other group comes after these, in collection order.
LONGEST_FIRST = (
    "slurm-cluster",                                                     # ~580: the local cluster, then the bed
    "tests/mpi/test_failures.py::reference+victim",                      # ~310: ~30 launches, most refused on purpose
    "tests/mpi/test_relayout_runs.py::runs",                             # 228: three launches, each resumed on other rank counts
    "shared-runs",                                                       # ~240
    "tests/mpi/test_device_albums_mpi.py::albums",                       # 146: a run and its resume in one launch
    "tests/mpi/test_faces_devices_study.py",                             # ~145: the pretraining, the device runs in one launch
    "tests/mpi/test_device_faces_mpi.py::folder+runs",                   # 141: six runs in one launch
    "tests/mpi/test_checkpoint.py::reference",                           # 106: SIGTERM / SIGUSR1 and bitwise resumes
    "tests/mpi/test_crossdevice_mpi.py::test_hsu_config_shrunk",         # 78: two 10-round runs
    "tests/mpi/test_fv_run.py::data_root+with_fv+without_fv",            # 77: two FV launches
    "tests/mpi/test_crossdevice_mpi.py::test_reduction_equals",          # 75
    "tests/mpi/test_reproduce.py::tiny",                                 # 71
    "tests/mpi/test_protocols_e2e.py::trained_run",                      # 54
    "tests/mpi/test_bad_records.py::broken_rec",                         # 49
    "tests/mpi/test_run_e2e.py::test_17_rank",                           # 45
    "tests/mpi/test_toy_summary_mpi.py::test_a_summary_part",            # 44
    "tests/unit/test_step_speed.py::test_compiled_model_computes_the_eager_model",   # 41: TorchInductor compiles
    "tests/mpi/test_run_e2e.py::test_demo_layout",                       # 36
    "tests/unit/test_step_speed.py::test_compiled_margin_head",          # 35: compiles too; queued with the rest it would end the suite alone
)


def start_order(group: str) -> int:
    for index, entry in enumerate(LONGEST_FIRST):
        if group == entry or group.startswith(entry):
            return index
    return len(LONGEST_FIRST)



def pytest_configure(config):
    config.addinivalue_line("markers", "xdist_group(name): tests a pytest-xdist worker runs together (conftest)")
