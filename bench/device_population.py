"""Benchmark, not a test: an end-to-end face-client run (configs/faces_devices.yaml: one synthetic identity a
client, the positive-only loss on the device, the server keeping W for all M clients; FedAwS with
fed.options.rows=round) against the population M at a fixed cohort, so that what grows with M shows: the sampler, the store of W, the server's class step (FedAwS's
spreadout, fed.options.rows), the collapse measure, the /clients log. Each point is one
`mpirun -n 3 python -m fedmpi.run` (the server and 2 trainer ranks) from a random start, read from its log: the
mean round time of the rounds after the first (the first pays for the lazy imports), the part of it beyond the
slowest trainer rank's training (the server's work and the exchange), the share of first-time clients (each
first computes its w_c: at M = 1,000 clients return, at 85,742 hardly any), the server rank's peak
resident memory (getrusage of each rank's own process, rank 0's reported) and the launch's wall time, which the
first launch at a new M spends mostly generating its synthetic set (M identities x --images, written once under
--out/data and reused).

    python -m bench.device_population [--populations 1000 85742] [--cohort 100] [--images 2] [--rounds 4]
                                      [--rules fedaws] [--out /tmp/bench_device_population] [-- OVERRIDE ...]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from fedmpi.store.h5log import LogReader
from jobs.mpirun import mpi_env, mpirun_binary

CONFIG = "configs/faces_devices.yaml"
# each rank runs as the child of this line, which prints the rank's own peak resident memory (KiB) once it ends
MEASURE = ("import os, resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
           "print('peak-rss', os.environ.get('OMPI_COMM_WORLD_RANK'), "
           "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(code)")


def one_run(out: Path, rule: str, population: int, cohort: int, images: int, rounds: int, extra: list[str]) -> dict:
    name = f"{rule}-M{population}"
    args = [f"fed.algorithm={rule}", f"clients.population={population}", f"clients.faces.identities={population}",
            f"clients.faces.images_per_identity={images}", f"clients.fraction={(cohort + 0.5) / population}",
            f"clients.rounds={rounds}", "eval.every=0", "run.device=cpu", f"data.root={out / 'data'}",
            f"log.dir={out}", f"log.name={name}", *(["fed.options={}"] if rule == "fedavg" else ["fed.options.rows=round"]), *extra]
    (out / name / "log.h5").unlink(missing_ok=True)
    cmd = [mpirun_binary(), "--oversubscribe", "--bind-to", "none", "-n", "3", sys.executable, "-c", MEASURE,
           sys.executable, "-m", "fedmpi.run", "--config", CONFIG, *args]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env())
    wall = time.monotonic() - started
    if proc.returncode:
        lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        return {"rule": rule, "M": population, "refused": lines[0] if lines else proc.stderr[-800:]}
    peaks = {int(rank): int(kib) / 1024 for _, rank, kib in
             (line.split() for line in proc.stderr.splitlines() if line.startswith("peak-rss "))}
    with LogReader(out / name / "log.h5") as log:
        rounds_table, classes, sampled = log.table("rounds"), log.table("classes"), log.table("clients")["ids"]
    round_times = rounds_table["round_time"]
    training = rounds_table["images_per_s"] * round_times / rounds_table["party_images_per_s"].reshape(-1)
    times = round_times[1:]
    return {"rule": rule, "M": population, "round_s": float(np.mean(times)), "round_s_min": float(np.min(times)),
            "beyond_training_s": float(np.mean((round_times - training)[1:])), "fresh": fresh_share(sampled)[1:].mean(),
            "round_times": round_times.tolist(), "server_peak_mb": peaks.get(0),
            "trainer_peak_mb": max(v for k, v in peaks.items() if k), "launch_to_end_s": wall,
            "mean_cosine": classes["mean_cosine"].tolist()}


def fresh_share(sampled: np.ndarray) -> np.ndarray:
    """Per round, the share of its clients sampled for the first time (a first-time client's device first computes
    its w_c, the mean feature of its images: a forward pass more than a returning client's round)."""
    seen: set[int] = set()
    out = []
    for ids in sampled:
        out.append(np.mean([int(k) not in seen for k in ids]))
        seen.update(int(k) for k in ids)
    return np.array(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--populations", type=int, nargs="+", default=[1000, 85742])
    parser.add_argument("--cohort", type=int, default=100, help="clients a round")
    parser.add_argument("--images", type=int, default=2, help="images per client (its identity's)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--rules", nargs="+", default=["fedaws"])
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench_device_population"))
    parser.add_argument("overrides", nargs="*", help="config overrides for every run (after --)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"cohort {args.cohort} one-identity clients of {args.images} images a round, {args.rounds} rounds, "
          f"1 server + 2 trainer ranks, CPU {' '.join(args.overrides)}")
    print(f"{'rule':8s} {'M':>7s} {'round s (mean, min)':>20s} {'beyond training s':>18s} {'first-time':>10s} "
          f"{'server MB':>10s} {'trainer MB':>11s} {'launch-to-end s':>16s}")
    results = []
    for rule in args.rules:
        for population in args.populations:
            r = one_run(args.out, rule, population, args.cohort, args.images, args.rounds, args.overrides)
            results.append(r)
            if "refused" in r:
                print(f"{rule:8s} {population:7d} failed: {r['refused']}", flush=True)
            else:
                print(f"{rule:8s} {population:7d} {r['round_s']:12.3f} {r['round_s_min']:7.3f} "
                      f"{r['beyond_training_s']:18.3f} {r['fresh']:10.0%} {r['server_peak_mb']:10.0f} {r['trainer_peak_mb']:11.0f} {r['launch_to_end_s']:16.1f}",
                      flush=True)
    (args.out / "device_population.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
