"""Benchmark: wall time per round of a rule (default: the registry's default, PFM) against the
centralized baseline (the baseline rule in one party) for the same number of steps on the same ranks (CPU,
gloo), and the backbone bytes moved per round against the minimum (|T| + 1 backbones). Launches
`python -m fedmpi.run` under mpirun and reads the run logs.

    python -m bench.rounds [--rule NAME] [--K 100] [--rounds 3] [--out /tmp/bench_rounds]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from jobs.mpirun import mpirun

from fedmpi.algorithms.registry import BASELINE, DEFAULT, RULES
from fedmpi.analysis.methods import method_label
from fedmpi.store.h5log import LogReader


def run(out: Path, name: str, K: int, rounds: int, extra: list[str]) -> dict:
    args = ["-m", "fedmpi.run", "--config", "configs/demo_cpu.yaml", f"fed.K={K}", "optim.epochs=1",
            f"optim.steps_per_epoch={K * rounds}", "optim.milestones=[]", "fv.enabled=false", "eval.every=0",
            f"log.dir={out}", f"log.name={name}", f"data.root={out / 'data'}", *extra]
    proc = mpirun(5, args, timeout=3600)
    if proc.returncode:
        raise SystemExit(f"{name} failed:\n{proc.stderr[-2000:]}")
    with LogReader(out / name / "log.h5") as log:
        t = log.table("rounds")
        return {"round_time": t["round_time"], "bytes": t["bytes_moved"], "parties": log.parties}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rule", choices=list(RULES), default=DEFAULT)
    parser.add_argument("--K", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench_rounds"))
    args = parser.parse_args()
    federated = run(args.out, f"{args.rule}-{args.K}", args.K, args.rounds, [f"fed.algorithm={args.rule}"])
    central = run(args.out, f"central-{args.K}", args.K, args.rounds,
                  ["fed.setting=centralized", f"fed.algorithm={BASELINE}"])
    from fedmpi.config import load_config
    from fedmpi.core.state import BackboneState
    from fedmpi.models.backbone import build_backbone
    import torch
    cfg = load_config("configs/demo_cpu.yaml")
    B = BackboneState(build_backbone(cfg, torch.device("cpu"), torch.float32)).nbytes()
    P = len(federated["parties"])
    steady = slice(1, None) if args.rounds > 1 else slice(None)
    print(f"demo layout (1 server + 2/1/1 trainer ranks), K={args.K}, {args.rounds} rounds, CPU/gloo")
    print(f"  {method_label(args.rule)[0]:<12} round time {np.mean(federated['round_time'][steady]):.2f} s "
          f"({np.mean(federated['round_time'][steady]) / args.K * 1000:.1f} ms/step)")
    print(f"  centralized  round time {np.mean(central['round_time'][steady]):.2f} s "
          f"({np.mean(central['round_time'][steady]) / args.K * 1000:.1f} ms/step)")
    print(f"  backbone {B / 1e6:.2f} MB; bytes moved per round {federated['bytes'][-1] / 1e6:.2f} MB = "
          f"{federated['bytes'][-1] / B:.1f} backbones; minimum (|T|+1) = {P + 1} backbones "
          f"({(P + 1) * B / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
