"""jobs/one_launch.py's runs in one launch, on one rank with fedmpi.run's main replaced: the runs go in order, each
from the RNG state the launch started with, each holding the lock only while it runs; the first that fails ends
the launch with its status, and the output names it."""
from __future__ import annotations

import fcntl
import random

import pytest

from jobs.one_launch import MARK, last_run, run_all


class OneRank:
    """MPI's world of one rank: its barriers are passed at once."""

    class Passed:
        def Test(self) -> bool:
            return True

    def Get_rank(self) -> int:
        return 0

    def Ibarrier(self):
        return self.Passed()


def held(path) -> bool:
    """Whether another open file holds the flock of `path`."""
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def test_each_run_holds_the_lock_while_it_runs_and_starts_from_the_launch_s_rng_state(tmp_path, capsys):
    lock, seen = tmp_path / "lock", []

    def main(argv):
        seen.append((argv, held(lock), random.random()))
        random.random()     # a run that draws leaves the next one the same start
        return 0

    random.seed(3)
    first = random.Random(3).random()
    assert run_all([["a", "log.name=one"], ["b"]], before=lambda i: seen.append(("before", i, held(lock))),
                   lock=str(lock), main=main, comm=OneRank()) == 0
    assert seen == [("before", 0, False), (["a", "log.name=one"], True, first), ("before", 1, False),
                    (["b"], True, first)]
    assert not held(lock)
    assert capsys.readouterr().out == f"{MARK}a log.name=one\n{MARK}b\n"


def test_without_a_lock_nothing_is_taken(tmp_path):
    lock = tmp_path / "lock"
    assert run_all([["a"]], main=lambda argv: 0 if not lock.exists() else 1, comm=OneRank()) == 0
    assert not lock.exists()


def test_the_first_failing_run_ends_the_launch_with_its_status_and_releases_the_lock(tmp_path, capsys):
    lock, ran = tmp_path / "lock", []

    def main(argv):
        ran.append(argv[0])
        return 3 if argv[0] == "b" else 0

    assert run_all([["a"], ["b", "log.name=bad"], ["c"]], lock=str(lock), main=main, comm=OneRank()) == 3
    assert ran == ["a", "b"] and not held(lock)
    assert last_run(capsys.readouterr().out + "rank 1: error\n") == "b log.name=bad"


@pytest.mark.parametrize("out", ["", "no run started\n"])
def test_an_output_without_a_run_names_none(out):
    assert last_run(out) == ""


def test_the_faces_devices_study_names_the_device_run_that_failed_in_its_launch(tmp_path, monkeypatch):
    import subprocess

    import jobs.faces_devices_study as study

    printed = f"{MARK}--config c log.name=fedavg-seed0 x=1\nround 2/2\n{MARK}--config c log.name=fedaws-fedfr-seed0\n"
    launches = []
    monkeypatch.setattr(study, "mpirun", lambda n, argv, **kw: launches.append((n, argv[:2])) or
                        subprocess.CompletedProcess(argv, 1, printed, "rank 1: error\n"))
    names = [("fedavg", 0), ("fedaws-fedfr", 0)]
    with pytest.raises(SystemExit, match=r"^fedaws-fedfr-seed0 failed \(exit 1\):\n"):
        study.device_runs(tmp_path, study.SCALES["tiny"], tmp_path / "init.pth", names, None)
    assert launches == [(3, ["-m", "jobs.one_launch"])]
