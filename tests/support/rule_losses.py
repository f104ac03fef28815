"""One short run of every registered rule (and the class rules on PFM's backbone), and of secure aggregation in
the silo (SecAgg over rules that compose with it, distributed DP), in one launch of 4 ranks under mpirun, and what
each logged: every table of its log, the final Θ's digest (run_digest.py). A refactor that must not change
behaviour compares this JSON before and after (bit-identical floats, written as their hex).

usage: python tests/support/rule_losses.py OUT.json [WORKDIR]   (WORKDIR: where the runs go, default a temporary
folder; run it from the worktree under test with PYTHONPATH=$PWD, under the heavy lock: 4 ranks, a few minutes)"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from run_digest import launch_and_digest  # noqa: E402
from tiny_runs import rule_overrides  # noqa: E402

# the rules' special inputs are their tests': FedFR's public set (tests/mpi/test_fedfr_runs.py), PrivacyFace's
# wide cones released from few identities (tests/mpi/test_relayout_runs.py)
SPECIAL = {
    "fedfr": ["model.head=cosface", "model.scale=30", "model.margin=0.4", "data.public.kind=synthetic",
              "data.public.identities=6", "data.public.images_per_identity=4", "optim.batch_size=2",
              "fed.options.first_epochs=2", "fed.options.min_epochs=1", "fed.options.epoch_step=1",
              "fed.options.first_decay=1", "fed.options.threshold=0.0"],
    "privacyface": ["fed.options.kappa=0.2", "fed.options.min_count=2", "fed.options.clusters=2",
                    "fed.options.candidates=64"],
}
VARIANTS = {"fedgc-pfm": ("fedgc", ["fed.options.backbone=pfm"]),
            "fedaws-fedfr": ("fedaws", ["fed.options.mode=fedfr", "fed.options.class_momentum=reset"]),
            "privacyface-pfm": ("privacyface", ["fed.options.backbone=pfm", *SPECIAL["privacyface"]])}
# secure aggregation as tests/mpi/test_secure_aggregation_runs.py runs it: a range that covers every update, 30 bits;
# distributed DP: each party's share of N(0, (z C)²) at a fixed z
SECURE = ["fv.enabled=false", "fed.secure_aggregation.mode=secagg", "fed.secure_aggregation.clipping_range=64.0",
          "fed.secure_aggregation.quantization_bits=30"]
SECURE_RUNS = {"secagg-fedavg": ("fedavg", [*SECURE, "fed.weighting=batch"]), "secagg-pfm": ("pfm", SECURE),
               "secagg-scaffold": ("scaffold", SECURE), "secagg-feddyn": ("feddyn", SECURE),
               "secagg-dp-fedavg": ("fedavg", [*SECURE, "fed.dp.enabled=true", "fed.dp.noise_multiplier=1e-5",
                                               "fed.dp.clip=1000.0"])}


def plan() -> dict[str, list[str]]:
    from fedmpi.algorithms.registry import RULES

    runs = {name: (name, SPECIAL.get(name, [])) for name in RULES} | VARIANTS | SECURE_RUNS
    return {name: rule_overrides([f"fed.algorithm={rule}", *extra], rounds=2, K=2)
            for name, (rule, extra) in runs.items()}


if __name__ == "__main__":
    sys.exit(launch_and_digest(4, plan(), *sys.argv[1:]))
