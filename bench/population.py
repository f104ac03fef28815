"""Benchmark, not a test: a cross-device round's time and the largest rank's peak memory against the population M
at a fixed cohort (the same clients a round, C = cohort / M), so that what grows with M shows (the sampler, the
partition's lookups, the server's store of the clients' states, the /clients log). Each point is one
`mpirun -n 2 python -m fedmpi.run --config configs/hsu_cifar10.yaml` (1 trainer rank), read from its log: the mean
round time of the rounds after the first, and the peak resident memory of its largest process (getrusage of the
launcher's children). Clients of a few images, so that a round is short and anything proportional to M would
stand out; SCAFFOLD's per-client c_i (6.7 MB each) are kept on the server for every client sampled so far.

    python -m bench.population [--populations 100 1000 10000] [--cohort 10] [--images 5] [--rounds 8]
                               [--rules fedavgm scaffold] [--out /tmp/bench_population] [--fig F.png]

--fig draws round time and peak memory against M (from OUT/population.json, which the runs write).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from jobs.mpirun import mpi_env, mpirun_binary
from fedmpi.store.h5log import LogReader

CONFIG = "configs/hsu_cifar10.yaml"
# the child that runs one launch and reports its process tree's peak resident memory (KiB on Linux)
MEASURE = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)")


def one_run(out: Path, rule: str, population: int, cohort: int, images: int, rounds: int) -> dict:
    name = f"{rule}-M{population}"
    args = [f"fed.algorithm={rule}", f"clients.population={population}", f"clients.fraction={cohort / population}",
            f"clients.images={images}", "clients.train_images=50000", "clients.test_images=10000",
            f"clients.rounds={rounds}", "clients.ranks=1", "eval.every=0", "run.device=cpu",
            f"data.root={out / 'data'}", f"log.dir={out}", f"log.name={name}"]
    (out / name / "log.h5").unlink(missing_ok=True)
    cmd = [mpirun_binary(), "--oversubscribe", "--bind-to", "none", "-n", "2", sys.executable, "-m", "fedmpi.run",
           "--config", CONFIG, *args]
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", MEASURE, *cmd], capture_output=True, text=True, env=mpi_env())
    wall = time.monotonic() - started
    if proc.returncode:
        lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        return {"rule": rule, "M": population, "refused": lines[0] if lines else proc.stderr[-500:]}
    with LogReader(out / name / "log.h5") as log:
        rounds_table = log.table("rounds")
    times = rounds_table["round_time"][1:]
    return {"rule": rule, "M": population, "round_s": float(np.mean(times)), "round_s_min": float(np.min(times)),
            "peak_mb": int(proc.stdout.split()[-1]) / 1024, "launch_to_end_s": wall}


def figure(results: list[dict], path: Path) -> None:
    from fedmpi.analysis.plots import panel_grid, save_figure

    fig, (time_ax, memory_ax) = panel_grid(2, max_cols=2, size=(4.2, 3.2))
    for rule in dict.fromkeys(r["rule"] for r in results):
        done = [r for r in results if r["rule"] == rule and "refused" not in r]
        M = [r["M"] for r in done]
        time_ax.plot(M, [r["round_s"] for r in done], marker="o", label=rule)
        memory_ax.plot(M, [r["peak_mb"] for r in done], marker="o", label=rule)
    for ax, label in ((time_ax, "round time (s)"), (memory_ax, "peak RSS, largest rank (MB)")):
        ax.set_xscale("log")
        ax.set_ylim(0, None)
        ax.set_xlabel("population M (the same 10 clients a round)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    save_figure(fig, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--populations", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--cohort", type=int, default=10, help="clients a round")
    parser.add_argument("--images", type=int, default=5, help="images per client")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--rules", nargs="+", default=["fedavgm", "scaffold"])
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench_population"))
    parser.add_argument("--fig", type=Path, default=None, help="draw OUT/population.json here; run nothing")
    args = parser.parse_args(argv)
    if args.fig:
        figure(json.loads((args.out / "population.json").read_text()), args.fig)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"cohort {args.cohort} clients of {args.images} images a round, {args.rounds} rounds, 1 trainer rank, CPU")
    print(f"{'rule':10s} {'M':>7s} {'round s (mean, min)':>20s} {'peak MB':>8s} {'launch-to-end s':>16s}")
    results = []
    for rule in args.rules:
        for population in args.populations:
            r = one_run(args.out, rule, population, args.cohort, args.images, args.rounds)
            results.append(r)
            if "refused" in r:
                print(f"{rule:10s} {population:7d} refused: {r['refused']}", flush=True)
            else:
                print(f"{rule:10s} {population:7d} {r['round_s']:12.3f} {r['round_s_min']:7.3f} {r['peak_mb']:8.0f} "
                      f"{r['launch_to_end_s']:16.1f}", flush=True)
    (args.out / "population.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
