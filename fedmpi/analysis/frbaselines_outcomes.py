"""What the face-recognition baselines' report (analysis/frbaselines_report.py) reads of each run's log: the held-out
and IJB-C curves, the bytes of a round, the personal models' numbers and the rule's own (FedGC's Reg, FedAwS's
spreadout, PrivacyFace's releases, FedFR's hard negatives)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import yaml

from fedmpi.algorithms.registry import method_key
from fedmpi.analysis.fedface_report import Report
from fedmpi.analysis.methods import FV_SUFFIX, method_color, method_label
from fedmpi.store.h5log import LogReader

IJB, FARS = "ijbc", ("1e-3", "1e-2")
PERSONAL = ("tar_far_1e-2", "tpir_far_1e-2")     # the personalised evaluation's columns in the tables


class Outcome:
    """What the report reads of one run's log."""

    def __init__(self, path: Path, labels: dict):
        self.labels = labels
        with LogReader(path) as log:
            ev, rounds, classes = log.table("eval"), log.table("rounds"), log.table("classes")
            personal, local = log.table("personal"), log.table("local")
            self.leaves = str(log.f.attrs.get("leaves_party", "backbone"))
            config = yaml.safe_load(log.config_yaml)
            parties = self.parties = len(log.parties)
        self.sets = [k.split("/")[0] for k in ev if k.endswith("/accuracy")]
        self.steps = ev.get("step", np.zeros(0))
        self.rounds = ev.get("round", np.zeros(0))
        self.curve = 100 * np.mean([ev[f"{s}/accuracy"] for s in self.sets], axis=0) if self.sets else np.zeros(0)
        self.accuracy = float(self.curve[-1]) if self.curve.size else math.nan
        self.per_set = {s: 100 * float(ev[f"{s}/accuracy"][-1]) for s in self.sets}
        self.tar = {far: 100 * ev[f"{IJB}/tar_far_{far}"] for far in FARS if f"{IJB}/tar_far_{far}" in ev}
        self.bytes = {k: float(np.mean(rounds[f"bytes_{k}"])) for k in ("up", "down", "intra")}
        self.classes = classes
        # each party's personal model at the last evaluation, averaged over the parties (%)
        self.personal = {c: 100 * float(np.nanmean(personal[c][-1])) for c in PERSONAL if c in personal}
        self.hard_negatives = local.get("hard_negatives")
        fed = config.get("fed", {})
        # the registry's colour of its rule (+FV: the darker shade), or of its baseline setting
        self.color = method_color(method_label(method_key(fed.get("algorithm", ""), fed.get("setting", "federated")))[0]
                                  + (FV_SUFFIX if config.get("fv", {}).get("enabled") else ""))
        # clusters a PrivacyFace release can hold in all parties
        self.clusters = parties * int(config.get("fed", {}).get("options", {}).get("clusters", 0) or 0)

    @property
    def own(self) -> str:
        """The rule's own numbers at the end (the log's `classes` table)."""
        c = self.classes
        if self.hard_negatives is not None:
            h = self.hard_negatives
            return f"hard negatives a party, mean: {np.mean(h[0]):.0f} (round 1) -> {np.mean(h[-1]):.0f}"
        if not c:
            return ""
        if "reg" in c:
            return f"Reg {c['reg'][0]:.3g} -> {c['reg'][-1]:.3g}"
        if "spreadout" in c:
            return f"spreadout L {c['spreadout'][0]:.3g} -> {c['spreadout'][-1]:.3g}"
        return (f"{int(c['released'].sum())} of {len(c['round']) * self.clusters} clusters released; "
                f"epsilon {c['epsilon'][-1]:.4g} at delta {c['delta'][-1]:.3g}")


def read_outcomes(report: Report) -> dict[str, Outcome]:
    return {name: Outcome(report.folder / "runs" / name / "log.h5", row["labels"])
            for name, row in report.rows.items() if name in report.done}
