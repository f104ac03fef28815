"""The bad-party and privacy study's runs as outcomes: one per run of the sweep, read from its HDF5 log with the
labels its index.json gives it (part, layout, method, kind of bad party, seed, noise multiplier), and the
privacy-utility points they make."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from fedmpi.analysis.fedface_report import Report
from fedmpi.store.h5log import LogReader

METHOD_LABELS = {"fedavg": "FedAvg", "fedface": "FedFace (PFM + FV)", "median": "FedMedian",
                 "trimmed_mean": "Trimmed mean", "krum": "Krum"}
KINDS = ("clean", "shuffled", "flipped")
SETTING_NAMES = {"3": "silo, 3 parties (FedAvg)", "cross-device": "cross-device, 40 clients (FedAvg)"}



class Outcome:
    """What the report reads of one run's log."""

    def __init__(self, path: Path, labels: dict):
        self.labels = labels
        with LogReader(path) as log:
            parties, ev = log.parties, log.table("eval")
            fv, influence, privacy = log.table("fv"), log.table("influence"), log.table("privacy")
            sets = log.val_sets
        bad = parties.index(labels["party"]) if labels.get("party") in parties else None
        # the mean over the held-out pair sets (silo), or the test set's accuracy (cross-device)
        self.sets = [s for s in sets or ["test"] if len(ev.get(f"{s}/accuracy", ()))]
        columns = [ev[f"{s}/accuracy"] for s in self.sets]
        final = [c[-1] for c in columns]
        self.accuracy = 100 * float(np.mean(final)) if final else math.nan
        lost = np.flatnonzero(np.isnan(np.array(columns)).any(axis=0)) if columns else []
        self.diverged_round = int(ev["round"][lost[0]]) + 1 if len(lost) else None
        self.fv_w = fv["w"][:, bad] if fv and bad is not None else np.zeros(0)
        self.fv_iterations = len(fv.get("round", ()))
        # what FV sees: per iteration, the least-squares slope of a candidate's mean validation accuracy (points)
        # against its weight of the bad party, averaged over the iterations
        slopes = [np.polyfit(c[:, bad], 100 * raw.mean(axis=1), 1)[0]
                  for c, raw in zip(fv.get("candidates", ()), fv.get("raw_scores", ())) if bad is not None]
        self.fv_slope = float(np.mean(slopes)) if slopes else math.nan
        self.influence = on_simplex_plane(influence["weights"])[:, bad] if influence and bad is not None else np.zeros(0)
        self.epsilon = float(privacy["epsilon"][-1]) if privacy else 0.0
        self.clip = float(privacy["clip"][-1]) if privacy else math.nan
        self.uniform = 1 / len(parties) if parties else math.nan

    @property
    def shown_accuracy(self):
        """The held-out accuracy, or "diverged (round N)"."""
        return f"diverged (round {self.diverged_round})" if self.diverged_round else self.accuracy

    @property
    def final_w(self) -> float:
        return float(self.fv_w[-1]) if self.fv_w.size else math.nan

    @property
    def mean_influence(self) -> float:
        return float(self.influence.mean()) if self.influence.size else math.nan


def on_simplex_plane(weights: np.ndarray) -> np.ndarray:
    """Effective weights [rounds, P] moved to sum 1 along the ones (a no-op for logs written since commit 4809fe3;
    earlier ones kept a rounding-level component along the ones, which is exactly what this removes)."""
    return weights - (weights.sum(axis=1, keepdims=True) - 1) / weights.shape[1]


def read_outcomes(report: Report) -> dict[str, Outcome]:
    return {name: Outcome(report.folder / "runs" / name / "log.h5", report.rows[name]["labels"])
            for name in report.rows if name in report.done}


def pick(outcomes: dict, **labels) -> list[Outcome]:
    return [o for o in outcomes.values() if all(o.labels.get(k) == v for k, v in labels.items())]


def dp_points(outcomes: dict) -> list[dict]:
    """The privacy-utility points: per setting and noise multiplier, its runs' seeds and accuracies (FedAvg's clean
    3-party runs are the silo's z = 0 point)."""
    runs = {}
    for o in pick(outcomes, part="dp") + pick(outcomes, part="bad", layout="3", method="fedavg", bad="clean"):
        runs.setdefault((o.labels["layout"], o.labels["z"]), []).append(o)
    points = []
    for (layout, z), group in sorted(runs.items()):
        group = sorted(group, key=lambda o: o.labels["seed"])
        finite = [o.accuracy for o in group if o.diverged_round is None]
        points.append({"setting": SETTING_NAMES[layout], "z": z, "epsilon": group[0].epsilon if z else math.inf,
                       "clip": group[0].clip, "runs": group, "accuracies": finite,
                       "accuracy": float(np.mean(finite)) if finite else math.nan})
    return points
