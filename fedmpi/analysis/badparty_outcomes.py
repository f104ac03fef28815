"""The bad-party and privacy study's runs as outcomes: one per run of the sweep, read from its HDF5 log with the
labels its index.json gives it (part, layout, method, kind of bad party, seed, noise multiplier, defence), and the
privacy-utility points they make. A run that stopped because its global model diverged (state DIVERGED) is an
outcome too: the round it stopped in and its one line, from its stderr.txt beside the log."""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from fedmpi.analysis.fedface_report import Report
from fedmpi.store.h5log import LogReader

METHOD_LABELS = {"fedavg": "FedAvg", "fedface": "FedFace (PFM + FV)", "median": "FedMedian",
                 "trimmed_mean": "Trimmed mean", "krum": "Krum"}
KINDS = ("clean", "shuffled", "flipped")
SETTING_NAMES = {"3": "silo, 3 parties (FedAvg)", "cross-device": "cross-device, 40 clients (FedAvg)"}



class Outcome:
    """What the report reads of one run's log; `stopped`: the line a diverged run stopped with (its log may hold
    the rounds before, or nothing where it stopped in its first round)."""

    def __init__(self, path: Path, labels: dict, stopped: str | None = None):
        self.labels, self.stopped = labels, stopped
        found = re.search(r"round (\d+): ", stopped or "")
        self.stopped_round = int(found.group(1)) if found else None
        parties, ev, fv, influence, privacy, rounds, sets = [], {}, {}, {}, {}, {}, []
        if Path(path).is_file() or stopped is None:
            with LogReader(path) as log:
                parties, ev, rounds = log.parties, log.table("eval"), log.table("rounds")
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
        # the server's upload check (logs written before it have neither column)
        norms = rounds.get("update_norm") if bad is not None else None
        self.ratios_per_round = (np.array([judge_ratio(row)[bad] for row in norms]) if norms is not None
                                 else np.zeros(0))
        finite = self.ratios_per_round[np.isfinite(self.ratios_per_round)]
        self.norm_ratio = float(np.median(finite)) if finite.size else math.nan
        every = np.array([judge_ratio(row) for row in norms]) if norms is not None and len(norms) else np.zeros(0)
        self.largest_ratio = float(every[np.isfinite(every)].max()) if np.isfinite(every).any() else math.nan
        excluded = rounds.get("uploads_excluded") if bad is not None else None
        self.excluded_rounds = int(excluded[:, bad].sum()) if excluded is not None else 0
        self.rounds_logged = len(rounds.get("round", ()))

    @property
    def shown_accuracy(self):
        """The held-out accuracy, "stopped (round N)" for a run that ended there, or "diverged (round N)" for one
        whose evaluation found its model's embeddings not finite."""
        if self.stopped is not None:
            return f"stopped (round {self.stopped_round})"
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


def judge_ratio(norms: np.ndarray) -> np.ndarray:
    """Each upload's update norm over the median of the others' (the upload check's ratio)."""
    from fedmpi.aggregation.upload_check import judge

    return judge(np.asarray(norms, dtype=np.float64), math.inf)[0]


def stop_line(folder: Path) -> str:
    """The one line a diverged run's server stopped it with (from its stderr.txt), without the rank's prefix."""
    path = folder / "stderr.txt"
    lines = path.read_text(errors="replace").splitlines() if path.is_file() else []
    found = next((line.strip() for line in lines if line.strip().startswith("rank 0 (server): ")), "")
    return found.split(": ", 1)[1] if found else "(no line in stderr.txt)"


def read_outcomes(report: Report) -> dict[str, Outcome]:
    runs = report.folder / "runs"
    outcomes = {name: Outcome(runs / name / "log.h5", report.rows[name]["labels"])
                for name in report.rows if name in report.done}
    outcomes.update({name: Outcome(runs / name / "log.h5", report.rows[name]["labels"], stop_line(runs / name))
                     for name in report.rows if name in report.diverged})
    return outcomes


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
