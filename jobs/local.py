"""Run a sweep's planned rows on this machine, one after another, each as `mpirun -n WORLD python -m
fedmpi.run ...` (a laptop or a single node without Slurm). The index is rewritten after every run, so an
interrupted sweep shows what finished; rerunning with --only picks up the rest."""
from __future__ import annotations

import fcntl
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from fedmpi.analysis.sweep_index import write_index
from fedmpi.errors import EXIT_DIVERGED
from jobs.mpirun import mpirun_binary
from jobs.site import ROOT

LOCK_PAUSE_S = 3.0   # after releasing the lock, before the next run asks again: a waiting flock takes it first


def mpirun_command(world: int) -> list[str]:
    return [mpirun_binary(), "--oversubscribe", "--bind-to", "none", "-n", str(world), sys.executable]


def local_env() -> dict:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # Open MPI refuses root unless told
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def run_rows_locally(rows: list[dict], folder: Path, index: dict, timeout_s: float, lock: str | None = None,
                     lock_hold_s: float = 0.0) -> None:
    """Each row in turn; its state becomes COMPLETED, DIVERGED (the run stopped because its global model diverged,
    fedmpi.errors.EXIT_DIVERGED: a result), FAILED (exit status recorded) or TIMEOUT, and `wall_s`
    records the seconds its mpirun took (start-up included), `cpu_s` the user + system CPU seconds of mpirun and
    every process it waited for (the ranks). Runs start in the repository's root, so that paths relative to it in
    the rows stay relative in the logs. `lock`: a file the runs hold (flock) only while they run, so that other
    work on a shared machine interleaves between them: released after each run, or after the run that ends
    `lock_hold_s` seconds of holding it; `wait_s` records each run's wait for it."""
    holder = LockHolder(lock, lock_hold_s)
    try:
        for i, row in enumerate(rows):
            row["state"] = "RUNNING"
            write_index(folder, index)
            print(f"[{i + 1}/{len(rows)}] {row['name']}", file=sys.stderr, flush=True)
            output = ROOT / row["log_dir"]
            output.mkdir(parents=True, exist_ok=True)
            cmd = [*mpirun_command(row["world"]), "-m", "fedmpi.run", "--config", str(ROOT / row["config"]),
                   *row.get("args", []), *row["overrides"]]
            waited = holder.acquire()
            start, cpu = time.monotonic(), children_cpu_s()
            try:
                with open(output / "stdout.txt", "w") as out, open(output / "stderr.txt", "w") as err:
                    code = subprocess.run(cmd, stdout=out, stderr=err, env=local_env(), timeout=timeout_s,
                                          cwd=ROOT).returncode
                row.update(state="COMPLETED" if code == 0 else "DIVERGED" if code == EXIT_DIVERGED else "FAILED",
                           exit_status=code)
            except subprocess.TimeoutExpired:
                row.update(state="TIMEOUT", exit_status=None)
            holder.release_if_spent()
            row.update(wall_s=round(time.monotonic() - start, 2), cpu_s=round(children_cpu_s() - cpu, 2))
            if lock:
                row["wait_s"] = round(waited, 2)
            write_index(folder, index)
            if lock and holder.handle is None and i + 1 < len(rows):
                time.sleep(LOCK_PAUSE_S)
    finally:
        holder.release()


class LockHolder:
    """The flock of the file `path` (created if missing; nothing when None), held from `acquire` until
    `release_if_spent` finds it held `hold_s` seconds or more (0: released after every run)."""

    def __init__(self, path: str | None, hold_s: float = 0.0):
        self.path, self.hold_s = path, hold_s
        self.handle = None
        self.since = 0.0

    def acquire(self) -> float:
        """Take the lock unless held; returns the seconds waited for it."""
        if self.path is None or self.handle is not None:
            return 0.0
        start = time.monotonic()
        self.handle = open(self.path, "a")
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        self.since = time.monotonic()
        return self.since - start

    def release_if_spent(self) -> None:
        if self.handle is not None and time.monotonic() - self.since >= self.hold_s:
            self.release()

    def release(self) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None

    def __enter__(self) -> "LockHolder":
        """`with LockHolder(path):` holds the lock for the block alone."""
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's finished children and everything they waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
