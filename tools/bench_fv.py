"""Benchmark (issue 4): round time with Federated Validation on (dedicated validator ranks, overlapped with
training, as many FV iterations as fit) against FV off, on the CPU demo (gloo). Launches `python -m
fedmpi.run` under mpirun and reads the run logs; prints figures, asserts nothing.

The first round is left out of the means (start-up; FV has no θ' before the first gather). Evaluation runs in
both (after round 1 and at the end), so it does not bias the comparison.

    python -m tools.bench_fv [--rounds 8] [--validators 2] [--hosted] [--out /tmp/bench_fv]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from mpirun import mpirun  # noqa: E402

from fedmpi.store.h5log import LogReader  # noqa: E402

CONFIG = "configs/demo_cpu.yaml"


def world_size(overrides: list[str]) -> int:
    out = subprocess.run([sys.executable, "-m", "fedmpi.layout", "--config", CONFIG, *overrides],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["world"]


def run(out: Path, name: str, rounds: int, extra: list[str]) -> dict:
    steps = 40  # demo: K=10, so 4 rounds per epoch
    overrides = [f"optim.steps_per_epoch={steps}", f"optim.epochs={max(1, rounds * 10 // steps)}",
                 "optim.milestones=[]", "eval.every=0", f"data.root={out / 'data'}", *extra]
    args = ["-m", "fedmpi.run", "--config", CONFIG, *overrides, f"log.dir={out}", f"log.name={name}"]
    proc = mpirun(world_size(overrides), args, timeout=3600)
    if proc.returncode:
        raise SystemExit(f"{name} failed:\n{proc.stdout[-1000:]}\n{proc.stderr[-2000:]}")
    with LogReader(out / name / "log.h5") as log:
        return {"rounds": log.table("rounds"), "fv": log.table("fv")}


def describe(label: str, result: dict, baseline: float | None = None) -> float:
    times = result["rounds"]["round_time"][1:]
    mean = float(np.mean(times))
    iterations = len(result["fv"].get("round", ()))
    line = f"  {label:<34} round time {mean:6.2f} s (median {np.median(times):.2f}, {len(times)} rounds)"
    if baseline is not None:
        line += f"  overhead {100 * (mean - baseline) / baseline:+6.1f} %  FV iterations completed {iterations}"
    print(line)
    return mean


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=8, help="rounds per run (multiple of 4)")
    parser.add_argument("--validators", type=int, default=2, help="dedicated validator ranks")
    parser.add_argument("--hosted", action="store_true", help="also time FV with the sets hosted on the server")
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench_fv"))
    args = parser.parse_args()
    if args.rounds % 4:
        raise SystemExit("--rounds must be a multiple of 4 (the demo has 4 rounds per epoch)")
    tag = f"{args.rounds}r"
    off = run(args.out, f"off-{tag}", args.rounds, ["fv.enabled=false"])
    dedicated = run(args.out, f"dedicated{args.validators}-{tag}", args.rounds,
                    ["fv.enabled=true", "fv.placement=dedicated", f"fv.validators={args.validators}",
                     "fv.iterations_per_round=0"])
    print(f"CPU demo ({CONFIG}), {args.rounds} rounds of K=10, PFM; FV: T=3, 5 sets, adaptive iterations")
    base = describe("FV off", off)
    describe(f"FV on, {args.validators} dedicated validators", dedicated, base)
    if args.hosted:
        hosted = run(args.out, f"hosted-{tag}", args.rounds,
                     ["fv.enabled=true", "fv.placement=server", "fv.iterations_per_round=0"])
        describe("FV on, sets hosted on the server", hosted, base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
