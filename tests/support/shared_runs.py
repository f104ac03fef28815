"""Small runs under mpirun that tests only read, all made in ONE launch per session: every launch pays the start-up
of each rank (torch, torchvision, h5py, mpi4py: about 4.5 s of CPU), the runs themselves a few seconds.

A test module declares its runs when it is imported (`declare`); the first test that asks for the fixture
`shared_runs` (tests/conftest.py) launches every declared run, in declaration order, with
tests/support/mpi_scripts/runs_in_one_launch.py, and gets {name: run folder}. Every run has the same world (WORLD ranks),
its own log.name, and saves its final global model as <run folder>.pt (run.save_final); all read one data.root.
A test that stops, kills or resumes a run launches it itself: that is about the process."""
from __future__ import annotations

import json
from pathlib import Path

WORLD = 4
SCRIPT = Path(__file__).resolve().parent / "mpi_scripts" / "runs_in_one_launch.py"
TIMEOUT_S = 1200   # all the runs together (each a few seconds on a quiet machine)
_DECLARED: dict[str, list[str]] = {}


def declare(name: str, overrides: list[str]) -> str:
    """A run of `python -m fedmpi.run OVERRIDES...` on WORLD ranks (log.dir, log.name, data.root and
    run.save_final are added); returns its name."""
    if _DECLARED.get(name, overrides) != overrides:
        raise ValueError(f"shared run {name!r} declared twice with different overrides")
    _DECLARED[name] = list(overrides)
    return name


def data_root_of(run: Path) -> Path:
    """The data.root a shared run read (the same for all)."""
    return run.parent / "data"


def launch_all(base: Path) -> dict[str, Path]:
    from jobs.mpirun import mpirun

    plan = [[*args, f"log.dir={base}", f"log.name={name}", f"data.root={base / 'data'}",
             f"run.save_final={base / name}.pt"] for name, args in _DECLARED.items()]
    (base / "plan.json").write_text(json.dumps(plan, indent=1))
    out = mpirun(WORLD, [str(SCRIPT), str(base / "plan.json")], timeout=TIMEOUT_S)
    started = [line for line in out.stdout.splitlines() if line.startswith("=== fedmpi.run ")]
    assert out.returncode == 0, f"the last run started: {started[-1:]}\n{out.stdout[-3000:]}{out.stderr[-3000:]}"
    return {name: base / name for name in _DECLARED}
