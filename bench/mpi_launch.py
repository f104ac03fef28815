"""Launch `python -m fedmpi.run` of a given checkout under mpirun for a benchmark, watching its output as it
comes: each stdout line with the wall-clock time it arrived, and optionally every rank wrapped in
bench/rank_probe.py (start-up cost, memory, CPU samples per rank)."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from bench.rank_probe import read_records
from jobs.mpirun import mpi_env, mpirun_binary

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "bench" / "rank_probe.py"


class Launch:
    """A finished run: `lines` [(time.time(), line)], `started` (time.time() at mpirun), `probes` {rank: dict}."""

    def __init__(self, started: float, lines: list, probes: dict):
        self.started, self.lines, self.probes = started, lines, probes

    def seconds_until(self, prefix: str) -> float:
        """Wall seconds from launch until the first stdout line starting with `prefix`."""
        for t, line in self.lines:
            if line.startswith(prefix):
                return t - self.started
        raise KeyError(f"no output line starts with {prefix!r}")

    def time_of(self, prefix: str) -> float:
        return self.started + self.seconds_until(prefix)


def run_fedmpi(repo: Path, ranks: int, overrides: list[str], probe_dir: Path | None = None,
               timeout: float = 1800, env: dict | None = None, wrapper: list[str] = ()) -> Launch:
    """`mpirun -n RANKS python -m fedmpi.run --config REPO/configs/demo_cpu.yaml OVERRIDES` in REPO (`env`:
    variables added to the ranks' environment; `wrapper`: a script and its arguments that run the module, as
    bench/rank_probe.py does with `probe_dir`)."""
    args = ["-m", "fedmpi.run", "--config", str(repo / "configs" / "demo_cpu.yaml"), *overrides]
    if probe_dir is not None:
        wrapper = [str(PROBE), str(probe_dir)]
    args = [*wrapper, *args]
    cmd = [mpirun_binary(), "--oversubscribe", "--bind-to", "none", "-n", str(ranks), sys.executable, *args]
    started = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=repo,
                            env=mpi_env({"PYTHONPATH": str(repo), **(env or {})}))
    lines = [(time.time(), line) for line in proc.stdout]
    _, err = proc.communicate(timeout=timeout)
    if proc.returncode:
        raise SystemExit(f"run in {repo} failed (exit status {proc.returncode}):\n{err[-2000:]}")
    return Launch(started, lines, read_records(probe_dir) if probe_dir is not None else {})


def cpu_share(record: dict, start: float, end: float) -> float:
    """Fraction of one core a probed rank used between two time.time() instants (from its CPU samples)."""
    inside = [(t, cpu) for t, cpu in record["samples"] if start <= t <= end]
    if len(inside) < 2:
        return float("nan")
    (t0, c0), (t1, c1) = inside[0], inside[-1]
    return (c1 - c0) / (t1 - t0)
