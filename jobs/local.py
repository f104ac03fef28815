"""Run a sweep's planned rows on this machine, one after another, each as `mpirun -n WORLD python -m
fedmpi.run ...` (a laptop or a single node without Slurm). The index is rewritten after every run, so an
interrupted sweep shows what finished; rerunning with --only picks up the rest."""
from __future__ import annotations

import contextlib
import fcntl
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from fedmpi.analysis.sweep_index import write_index
from jobs.mpirun import mpirun_binary
from jobs.site import ROOT


def mpirun_command(world: int) -> list[str]:
    return [mpirun_binary(), "--oversubscribe", "--bind-to", "none", "-n", str(world), sys.executable]


def local_env() -> dict:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # Open MPI refuses root unless told
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def run_rows_locally(rows: list[dict], folder: Path, index: dict, timeout_s: float, lock: str | None = None) -> None:
    """Each row in turn; its state becomes COMPLETED, FAILED (exit status recorded) or TIMEOUT, and `wall_s`
    records the seconds its mpirun took (start-up included), `cpu_s` the user + system CPU seconds of mpirun and
    every process it waited for (the ranks). Runs start in the repository's root, so that paths relative to it in
    the rows stay relative in the logs. `lock`: a file each run holds (flock) while it runs, and only then, so
    that other work on a shared machine interleaves between runs; `wait_s` records the wait for it."""
    for i, row in enumerate(rows):
        row["state"] = "RUNNING"
        write_index(folder, index)
        print(f"[{i + 1}/{len(rows)}] {row['name']}", file=sys.stderr, flush=True)
        output = ROOT / row["log_dir"]
        output.mkdir(parents=True, exist_ok=True)
        cmd = [*mpirun_command(row["world"]), "-m", "fedmpi.run", "--config", str(ROOT / row["config"]),
               *row.get("args", []), *row["overrides"]]
        waited = time.monotonic()
        with held(lock):
            start, cpu = time.monotonic(), children_cpu_s()
            try:
                with open(output / "stdout.txt", "w") as out, open(output / "stderr.txt", "w") as err:
                    code = subprocess.run(cmd, stdout=out, stderr=err, env=local_env(), timeout=timeout_s,
                                          cwd=ROOT).returncode
                row.update(state="COMPLETED" if code == 0 else "FAILED", exit_status=code)
            except subprocess.TimeoutExpired:
                row.update(state="TIMEOUT", exit_status=None)
        row.update(wall_s=round(time.monotonic() - start, 2), cpu_s=round(children_cpu_s() - cpu, 2))
        if lock:
            row["wait_s"] = round(start - waited, 2)
        write_index(folder, index)


@contextlib.contextmanager
def held(lock: str | None):
    """Hold the flock of the file `lock` (created if missing) for the block; nothing when None."""
    if lock is None:
        yield
        return
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's finished children and everything they waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
