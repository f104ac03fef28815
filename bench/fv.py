"""Benchmark: what Federated Validation costs and what it gets done, on the CPU demo (gloo).

    python -m bench.fv [--rounds 8] [--validators 2] [--hosted] [--pin] [--baseline DIR] [--out /tmp/bench_fv]

Runs `python -m fedmpi.run` under mpirun (every rank through bench/rank_probe.py) and reads the run logs:
  FV off                         the reference round time
  FV on, dedicated validators    round-time overhead, FV iterations completed in each round (adaptive mode:
                                 as many as fit), and the validator ranks' CPU (process CPU time / wall) from
                                 the end of round 2 to the end of the last round, and their CPU share while
                                 idle (waiting for the server's next request; from their message traces)
  FV idle                        dedicated validators with one FV iteration per round on tiny sets
                                 (fv.iterations_per_round=1, 2 pairs per fold): the validators wait almost all
                                 the time, so their CPU share is what waiting costs (plus that small work)
  FV on, hosted (--hosted)       the sets on the server itself
The first round is left out of the means (start-up; FV has no θ' before the first gather). `--baseline DIR`
runs another checkout (e.g. `git worktree add /tmp/main main`) the same way, after this one. `--pin` gives the
validators cores of their own: validator ranks run on the last min(validators, cores - 1) cores, every other
rank (in every run, FV off included) on the cores before them, so that the overhead is what FV costs the round
when validation does not take CPU from training. Prints figures, asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from fedmpi.store.h5log import LogReader
from bench.mpi_launch import ROOT, cpu_share, mpi_env, run_fedmpi

CONFIG = "configs/demo_cpu.yaml"


def world_size(repo: Path, overrides: list[str]) -> int:
    import json
    import subprocess

    out = subprocess.run([sys.executable, "-m", "fedmpi.layout", "--config", str(repo / CONFIG), *overrides],
                         capture_output=True, text=True, check=True, cwd=repo, env=mpi_env({"PYTHONPATH": str(repo)}))
    return json.loads(out.stdout)["world"]


def core_split(validators: int) -> tuple[str, str]:
    """(the other ranks' cores, the validators' cores) for --pin: the validators on the last cores."""
    cores = sorted(os.sched_getaffinity(0))
    own = max(1, min(validators, len(cores) - 1))
    return ",".join(map(str, cores[:-own])), ",".join(map(str, cores[-own:]))


def cpu_sets(others: int, validators: int) -> str:
    """RANK_PROBE_CPUS (bench/rank_probe.py) for --pin: server and trainers first, then the validator ranks."""
    rest, theirs = core_split(validators)
    return ";".join([rest] * others + [theirs] * validators)


def run(repo: Path, out: Path, name: str, rounds: int, extra: list[str], pin: int = 0) -> dict:
    """pin: 0, or the number of validator ranks whose cores the other ranks must leave free (--pin)."""
    steps = 40  # K=10 (set here, whatever the demo's K), so 4 rounds per epoch
    overrides = ["fed.K=10", f"optim.steps_per_epoch={steps}", f"optim.epochs={max(1, rounds * 10 // steps)}",
                 "optim.milestones=[]", "eval.every=0", f"data.root={out / 'data'}", *extra]
    trace = out / f"{name}-trace"
    world, others = world_size(repo, overrides), world_size(repo, [*overrides, "fv.enabled=false"])
    env = {"FEDMPI_VALIDATOR_TRACE": str(trace)}
    if pin:
        env["RANK_PROBE_CPUS"] = cpu_sets(others, max(pin, world - others))
    launch = run_fedmpi(repo, world, [*overrides, f"log.dir={out}", f"log.name={name}"],
                        probe_dir=out / f"{name}-probe", env=env)
    with LogReader(out / name / "log.h5") as log:
        result = {"rounds": log.table("rounds"), "fv": log.table("fv")}
    validators = [r for r in launch.probes if r >= others]
    if pin:  # as the ranks saw it
        result["pinned"] = sorted({(r >= others, tuple(p["cpus"])) for r, p in launch.probes.items()})
    if validators and rounds > 2:
        start, end = launch.time_of("round 2/"), launch.time_of(f"round {rounds}/")
        result["validator_cpu"] = [cpu_share(launch.probes[r], start, end) for r in sorted(validators)]
        result["validator_idle"] = [idle_share(trace / f"validator-{r}.jsonl") for r in sorted(validators)]
    return result


def idle_share(path: Path) -> tuple[float, float] | None:
    """(CPU seconds / wall seconds, wall seconds) a validator spent waiting for the server's control words, from
    its message trace (None: a checkout whose trace does not record waiting)."""
    import json

    waits = [r for r in map(json.loads, path.read_text().splitlines()) if "wait_s" in r] if path.exists() else []
    if not waits:
        return None
    wall = sum(r["wait_s"] for r in waits)
    return sum(r["wait_cpu_s"] for r in waits) / wall, wall


def describe(label: str, result: dict, rounds: int, baseline: float | None = None) -> float:
    times = result["rounds"]["round_time"][1:]
    mean = float(np.mean(times))
    line = f"    {label:<32} round time {mean:6.2f} s (median {np.median(times):.2f}, {len(times)} rounds)"
    if baseline is not None:
        line += f"  overhead {100 * (mean - baseline) / baseline:+6.1f} %"
    print(line)
    for validator, cpus in result.get("pinned", []):
        print(f"      {'validator' if validator else 'other'} ranks ran on cores {','.join(map(str, cpus))}")
    if baseline is not None:
        done = np.bincount(np.asarray(result["fv"].get("round", []), dtype=int), minlength=rounds)
        print(f"      FV iterations completed: {int(done.sum())} in all; per round {' '.join(map(str, done))}")
    if "validator_cpu" in result:
        shares = " ".join(f"{100 * s:.1f} %" for s in result["validator_cpu"])
        print(f"      validator CPU (process CPU / wall, rounds 3..{rounds}): {shares} of a core")
        idle = " ".join("n/a" if s is None else f"{100 * s[0]:.2f} % over {s[1]:.0f} s"
                        for s in result["validator_idle"])
        print(f"      of which idle (waiting for the server, whole run): {idle} of a core")
    return mean


def bench(repo: Path, out: Path, rounds: int, validators: int, hosted: bool, pinned: bool) -> None:
    tag = f"{rounds}r" + ("-pinned" if pinned else "")
    dedicated = ["fv.enabled=true", "fv.placement=dedicated", f"fv.validators={validators}"]
    pin = validators if pinned else 0
    off = run(repo, out, f"off-{tag}", rounds, ["fv.enabled=false"], pin)
    on = run(repo, out, f"dedicated{validators}-{tag}", rounds, [*dedicated, "fv.iterations_per_round=0"], pin)
    idle = run(repo, out, f"idle{validators}-{tag}", rounds, [*dedicated, "fv.iterations_per_round=1",
                                                              "data.val_pairs_per_fold=2"], pin)
    base = describe("FV off", off, rounds)
    describe(f"FV on, {validators} dedicated validators", on, rounds, base)
    describe(f"FV idle, {validators} dedicated validators", idle, rounds, base)
    if hosted:
        describe("FV on, sets hosted on the server", run(repo, out, f"hosted-{tag}", rounds,
                                                          ["fv.enabled=true", "fv.placement=server",
                                                           "fv.iterations_per_round=0"], pin), rounds, base)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=8, help="rounds per run (multiple of 4)")
    parser.add_argument("--validators", type=int, default=2, help="dedicated validator ranks")
    parser.add_argument("--hosted", action="store_true", help="also time FV with the sets hosted on the server")
    parser.add_argument("--pin", action="store_true", help="validators on cores of their own (see above)")
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout to compare with (before)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench_fv"))
    args = parser.parse_args()
    if args.rounds % 4 or args.rounds < 4:
        raise SystemExit("--rounds must be a multiple of 4 (the demo has 4 rounds per epoch)")
    rest, theirs = core_split(args.validators)
    print(f"CPU demo ({CONFIG}), {args.rounds} rounds of K=10, PFM; FV: T=3, 5 sets; {os.cpu_count()} cores"
          + (f"; validators on cores {theirs}, the other ranks on {rest}" if args.pin else ""))
    repos = {"after": ROOT} if args.baseline is None else {"after": ROOT, "before": args.baseline.resolve()}
    for label, repo in repos.items():
        print(f"  {label} ({repo}), load at start {' '.join(f'{x:.2f}' for x in os.getloadavg())}:")
        bench(repo, args.out / label, args.rounds, args.validators, args.hosted, args.pin)
    return 0


if __name__ == "__main__":
    sys.exit(main())
