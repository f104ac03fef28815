"""Shared by the checkpoint, failure and export tests: one tiny deterministic run (server + party a of 2 ranks
+ party b of 1 rank, 6 rounds of K=2, a checkpoint every 3 rounds), how to launch it, and how to compare runs.

The uninterrupted reference run is made once per test session (`reference_run`) and only read afterwards;
tests that change a run folder work on a copy (`copy_run`)."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from bench.mpi_launch import PROBE
from jobs.mpirun import ROOT, mpi_env, mpirun, mpirun_binary

WORLD = 4
ROUNDS = 6
SCRIPTS = Path(__file__).resolve().parent
SIGNAL_SCRIPT = SCRIPTS / "ckpt_signal_at_round.py"
TIMING_COLUMNS = {"wall_time", "round_time", "images_per_s", "party_images_per_s"}

CONFIG = {
    "parties": [
        {"name": "a", "ranks": 2, "data": {"kind": "synthetic", "style": "ms1m", "identities": 8,
                                           "images_per_identity": 4}},
        {"name": "b", "ranks": 1, "data": {"kind": "synthetic", "style": "ga", "identities": 6,
                                           "images_per_identity": 4}},
    ],
    "data": {"image_size": 16, "workers": 0, "val_sets": ["lfw"], "val_pairs_per_fold": 6},
    "model": {"backbone": "ir18", "width": 0.125, "embedding_size": 16, "scale": 16.0},
    "optim": {"lr": 0.1, "batch_size": 4, "epochs": 1, "steps_per_epoch": 2 * ROUNDS, "milestones": []},
    "fed": {"algorithm": "pfm", "K": 2},
    "eval": {"every": 3},
    "run": {"deterministic": True},
    "checkpoint": {"every": 3, "keep": 2},
}


@dataclass(frozen=True)
class Run:
    base: Path          # holds config.yaml, data/ and the log.dir runs/
    name: str

    @property
    def config(self) -> Path:
        return self.base / "config.yaml"

    @property
    def folder(self) -> Path:
        return self.base / "runs" / self.name

    @property
    def ckpt(self) -> Path:
        return self.folder / "ckpt"

    def args(self, *extra: str) -> list[str]:
        return ["-m", "fedmpi.run", "--config", str(self.config), f"log.dir={self.base / 'runs'}",
                f"log.name={self.name}", f"data.root={self.base / 'data'}", *extra]

    def launch(self, *extra: str, n: int = WORLD, timeout: float = 240,
               probe: Path | None = None) -> subprocess.CompletedProcess:
        """The run under mpirun; with `probe`, every rank through bench/rank_probe.py (its record in probe/)."""
        wrapper = [str(PROBE), str(probe)] if probe else []
        return mpirun(n, [*wrapper, *self.args(*extra)], timeout=timeout)

    def launch_signalled(self, rank: int, round_: int, signal: str, *extra: str, stamp: Path | None = None,
                         timeout: float = 240, cont_after: float = 120) -> subprocess.CompletedProcess:
        """The run, with trainer rank `rank` sending itself SIG`signal` in round `round_` (the time it does so
        written to `stamp`)."""
        argv = [str(SIGNAL_SCRIPT), "--rank", str(rank), "--round", str(round_), "--signal", signal,
                "--cont-after", str(cont_after),
                *(["--stamp", str(stamp)] if stamp else []), "--", *self.args(*extra)[2:]]
        return mpirun(WORLD, argv, timeout=timeout)

    def popen(self, *extra: str) -> subprocess.Popen:
        cmd = [mpirun_binary(), "--oversubscribe", "--bind-to", "none", "-n", str(WORLD), sys.executable,
               *self.args(*extra)]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=mpi_env(),
                                cwd=str(ROOT))


def new_run(base: Path, name: str) -> Run:
    base.mkdir(parents=True, exist_ok=True)
    config = base / "config.yaml"
    if not config.exists():
        config.write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    return Run(base, name)


_REFERENCE: dict = {}


def reference_run(tmp_path_factory) -> Run:
    """The uninterrupted 6-round run (made once per session): checkpoints after rounds 3 and 6, the final Θ
    saved by the server with run.save_final; what each rank loaded recorded in base/probe/rank-R.json."""
    if "run" not in _REFERENCE:
        run = new_run(tmp_path_factory.mktemp("ckpt-reference"), "reference")
        result = run.launch(f"run.save_final={run.base / 'final.pt'}", probe=run.base / "probe")
        assert result.returncode == 0, result.stdout + result.stderr
        _REFERENCE["run"] = run
    return _REFERENCE["run"]


def sibling_run(reference: Run, base: Path, name: str) -> Run:
    """A new run with the reference's config, reading the reference's data (generated once)."""
    run = new_run(base, name)
    if not (base / "data").exists():
        (base / "data").symlink_to(reference.base / "data", target_is_directory=True)
    return run


def copy_run(reference: Run, base: Path, name: str, drop_after: int | None = None) -> Run:
    """A copy of the reference run folder under another log.name, sharing its data; checkpoints after round
    `drop_after` removed."""
    run = sibling_run(reference, base, name)
    shutil.copytree(reference.folder, run.folder)
    if drop_after is not None:
        for folder in run.ckpt.glob("round_*"):
            if int(folder.name.split("_")[1]) > drop_after:
                shutil.rmtree(folder)
    return run


def final_theta(run: Run):
    from fedmpi.store.checkpoint import read_part

    return read_part(run.ckpt / f"round_{ROUNDS:06d}" / "server.h5")["theta"]


def log_tables(run: Run) -> dict[str, dict[str, np.ndarray]]:
    """Every table of the run log, without the columns that measure time."""
    from fedmpi.store.h5log import LogReader

    with LogReader(run.folder / "log.h5") as log:
        return {table: {k: v for k, v in log.table(table).items() if k not in TIMING_COLUMNS}
                for table in ("rounds", "eval", "fv")}


def assert_same_run(a: Run, b: Run) -> None:
    """Bitwise: the final global backbone and every logged value except wall times."""
    ta, tb = final_theta(a), final_theta(b)
    assert ta.dtype == tb.dtype and ta.shape == tb.shape
    assert bool((ta == tb).all()), f"final Θ differs in {int((ta != tb).sum())} of {ta.numel()} entries"
    la, lb = log_tables(a), log_tables(b)
    for table in la:
        assert la[table].keys() == lb[table].keys(), table
        for column in la[table]:
            np.testing.assert_array_equal(lb[table][column], la[table][column], err_msg=f"{table}/{column}")
    assert list(la["rounds"]["round"]) == list(range(ROUNDS))


def rounds_logged(run: Run) -> list[int]:
    return [int(r) for r in log_tables(run)["rounds"]["round"]]


def snapshot(folder: Path) -> dict[str, str]:
    """sha256 of every file under a folder: to show that a failed launch changed nothing."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def error_lines(stderr: str) -> list[str]:
    """fedmpi's own error lines: `error: ...` (config, launch) or `rank R (role): ...` (a rank failed); mpirun
    may indent a line it interleaves with its own banners."""
    lines = [line.strip() for line in stderr.splitlines()]
    return [line for line in lines if line.startswith("error: ") or line.startswith("rank ")]
