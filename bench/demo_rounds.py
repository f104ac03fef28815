"""Figures of a finished demo run (`make demo`), read from its log: per round the wall time and how much of it
each party's trainer ranks spent idle (waiting for the server: 1 - their slowest rank's seconds of local training
/ the round's time), the FV iterations completed and the final FV weights, the held-out accuracy per set at the
first and the last evaluation. Prints figures, asserts nothing.

    python -m bench.demo_rounds runs/NAME [--skip-first]

--skip-first leaves round 1 out of the idle summary (it carries the start-up's first batches and has no FV).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from fedmpi.store.h5log import LogReader


def idle_fractions(rounds: dict, parties: list[str], K: int, batch: int, ranks: list[int]) -> np.ndarray:
    """[rounds, parties]: 1 - a party's slowest rank's training seconds / the round's wall time."""
    images = np.array([K * batch * r for r in ranks], dtype=np.float64)
    seconds = images[None, :] / np.maximum(rounds["party_images_per_s"], 1e-12)
    return 1.0 - seconds / rounds["round_time"][:, None]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="the run folder (holding log.h5)")
    parser.add_argument("--skip-first", action="store_true", help="leave round 1 out of the idle summary")
    args = parser.parse_args(argv)
    import yaml

    with LogReader(args.run / "log.h5") as log:
        cfg = yaml.safe_load(log.config_yaml)
        parties, rounds, fv, evals = log.parties, log.table("rounds"), log.table("fv"), log.table("eval")
        sets = log.val_sets
    ranks = [p["ranks"] for p in cfg["parties"]]
    idle = idle_fractions(rounds, parties, cfg["fed"]["K"], cfg["optim"]["batch_size"], ranks)
    print(f"{args.run}: {len(rounds['round'])} rounds, wall {rounds['wall_time'][-1]:.1f} s "
          f"(sum of round times {rounds['round_time'].sum():.1f} s)")
    print("round  time_s  fv_it  idle " + " ".join(f"{p:>6}" for p in parties))
    for i, r in enumerate(rounds["round"]):
        print(f"{int(r) + 1:5d} {rounds['round_time'][i]:7.2f} {int(rounds['fv_iterations'][i]):6d}       "
              + " ".join(f"{x:6.1%}" for x in idle[i]))
    body = idle[1:] if args.skip_first and len(idle) > 1 else idle
    print("idle fraction per party (mean, max over rounds"
          + (", round 1 left out" if args.skip_first else "") + "): "
          + ", ".join(f"{p} {body[:, j].mean():.1%} / {body[:, j].max():.1%}" for j, p in enumerate(parties)))
    if fv:
        w = fv["w"][-1]
        print(f"FV iterations: {len(fv['round'])}; final w " + " ".join(f"{p} {x:.3f}" for p, x in zip(parties, w))
              + f"; distance from uniform (L1) {np.abs(w - 1 / len(w)).sum():.3f}")
    if evals and len(evals["round"]):
        first, last = 0, len(evals["round"]) - 1
        for i, label in ((first, "first"), (last, "last")):
            accs = [100 * evals[f"{s}/accuracy"][i] for s in sets]
            print(f"held-out accuracy after round {int(evals['round'][i]) + 1} ({label}): mean {np.mean(accs):.1f} % "
                  + " ".join(f"{s} {a:.1f}" for s, a in zip(sets, accs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
