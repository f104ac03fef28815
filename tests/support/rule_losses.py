"""One short run of every registered rule (and the class rules on PFM's backbone) in one launch under mpirun, and
what each logged: every party's loss per round, the log's per-party and class tables, the final Θ's digest. A
refactor that must not change behaviour compares this JSON before and after (bit-identical floats, written as
their hex).

usage: python tests/support/rule_losses.py OUT.json [WORKDIR]   (WORKDIR: where the runs go, default a temporary
folder; run it under the heavy lock: 4 ranks for a few minutes)"""
from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "mpi")]

from algorithm_harness import rule_overrides  # noqa: E402

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


def plan(base: Path) -> dict[str, list[str]]:
    from fedmpi.algorithms.registry import RULES

    runs = {name: (name, SPECIAL.get(name, [])) for name in RULES} | VARIANTS
    return {name: [*rule_overrides([f"fed.algorithm={rule}", *extra], rounds=2, K=2), f"log.dir={base}",
                   f"log.name={name}", f"data.root={base / 'data'}", f"run.save_final={base / name}.pt"]
            for name, (rule, extra) in runs.items()}


def exact(values) -> list:
    import numpy as np

    return [float(v).hex() if np.issubdtype(np.asarray(v).dtype, np.floating) else int(v)
            for v in np.asarray(values).reshape(-1)]


def logged(run: Path) -> dict:
    import torch

    from fedmpi.store.log_reader import LogReader

    out = {}
    with LogReader(run / "log.h5") as log:
        out["parties"] = log.parties
        out["loss"] = exact(log.table("rounds")["loss"])
        for table in ("local", "classes"):
            if table in log.f:
                out[table] = {k: exact(v) for k, v in sorted(log.table(table).items())
                              if not k.endswith("_s")}      # seconds differ from run to run
    theta = torch.load(f"{run}.pt")["theta"]
    out["theta_sha256"] = hashlib.sha256(theta.numpy().tobytes()).hexdigest()
    return out


def main(out: str, workdir: str | None = None) -> int:
    from jobs.mpirun import mpirun

    base = Path(workdir or tempfile.mkdtemp(prefix="rule-losses-"))
    base.mkdir(parents=True, exist_ok=True)
    runs = plan(base)
    (base / "plan.json").write_text(json.dumps(list(runs.values()), indent=1))
    done = mpirun(4, [str(HERE / "mpi_scripts" / "runs_in_one_launch.py"), str(base / "plan.json")], timeout=1800)
    if done.returncode:
        print(done.stdout[-3000:], done.stderr[-3000:])
        return done.returncode
    Path(out).write_text(json.dumps({name: logged(base / name) for name in runs}, indent=1, sort_keys=True))
    print(f"{len(runs)} runs logged in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
