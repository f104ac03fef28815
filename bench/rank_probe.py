"""Run a module as one MPI rank and record what its start-up cost: `python bench/rank_probe.py OUT -m MOD ARGS`.

Used by bench/startup.py (run by path, so it can wrap any checkout's `fedmpi.run`). Counts the CPU and
wall time spent inside outermost `import` statements, and at exit writes OUT/rank-<R>.json with those, the
process's CPU time, its peak RSS and its memory at exit (RSS, PSS, anonymous), which heavy packages it
loaded, and (time.time(), process CPU seconds) sampled every SAMPLE_S by a sleeping thread. Nothing in the
wrapped run changes besides the few microseconds each import statement gains. RANK_PROBE_CPUS (e.g.
"0;0;0;1": one CPU set per rank, `;` between ranks, `,` within a set) pins each rank to its CPUs before it starts.
"""
from __future__ import annotations

import atexit
import builtins
import json
import os
import resource
import runpy
import sys
import threading
import time
from pathlib import Path

SAMPLE_S = 0.25
HEAVY = ("torch", "torchvision", "torch._dynamo", "torch._inductor", "sympy", "h5py", "matplotlib", "PIL.Image",
         "mpi4py.MPI", "dp_accounting", "scipy")


class ImportClock:
    """Time spent in outermost imports (nested ones are inside them)."""

    def __init__(self):
        self.depth, self.cpu, self.wall = 0, 0.0, 0.0
        self._import = builtins.__import__

    def __call__(self, *args, **kwargs):
        if self.depth:
            self.depth += 1
            try:
                return self._import(*args, **kwargs)
            finally:
                self.depth -= 1
        self.depth = 1
        c0, w0 = time.process_time(), time.perf_counter()
        try:
            return self._import(*args, **kwargs)
        finally:
            self.cpu += time.process_time() - c0
            self.wall += time.perf_counter() - w0
            self.depth = 0


def memory_mb() -> dict:
    fields = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                fields[parts[0][:-1]] = int(parts[1]) / 1024
    return {"rss_mb": fields["Rss"], "pss_mb": fields["Pss"], "anon_mb": fields["Anonymous"]}


def sample_cpu(samples: list) -> None:
    while True:
        t = os.times()
        samples.append((time.time(), t.user + t.system))
        time.sleep(SAMPLE_S)


def this_rank() -> int:
    return int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK", "0")))


def pin(cpu_sets: str) -> None:
    """Pin this process (and the threads it starts later) to its rank's CPUs in RANK_PROBE_CPUS."""
    sets = cpu_sets.split(";")
    os.sched_setaffinity(0, {int(c) for c in sets[this_rank() % len(sets)].split(",")})


def read_records(folder) -> dict[int, dict]:
    """What the ranks of a probed launch wrote in `folder` (OUT above), by rank."""
    records = {}
    for path in Path(folder).glob("rank-*.json"):
        record = json.loads(path.read_text())
        records[record["rank"]] = record
    return records


def main() -> None:
    out, module, args = sys.argv[1], sys.argv[3], sys.argv[4:]
    assert sys.argv[2] == "-m", "usage: rank_probe.py OUT -m MODULE [ARGS...]"
    if os.environ.get("RANK_PROBE_CPUS"):
        pin(os.environ["RANK_PROBE_CPUS"])
    clock = ImportClock()
    started = time.perf_counter()
    samples: list = []
    threading.Thread(target=sample_cpu, args=(samples,), daemon=True).start()

    def report() -> None:
        rank = this_rank()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        record = {"rank": rank, "import_cpu_s": clock.cpu, "import_wall_s": clock.wall,
                  "cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": time.perf_counter() - started,
                  "peak_rss_mb": usage.ru_maxrss / 1024, **memory_mb(),
                  "loaded": [m for m in HEAVY if m in sys.modules],
                  "cpus": sorted(os.sched_getaffinity(0)), "samples": list(samples)}
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
            json.dump(record, f)

    atexit.register(report)
    builtins.__import__ = clock
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
