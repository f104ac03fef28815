"""The results file of the bad-party and privacy study (jobs/badparty_study.py, `python -m jobs.reproduce
badparty`): from the HDF5 logs of the study's sweep folder, (1) FedFace's final FV weight of the bad party seed by
seed against its clean twin, with held-out accuracy of FedFace and FedAvg; (2) held-out accuracy and the bad
party's influence (its effective weight in the round's combination, the log's `influence` table) for every rule,
layout and kind of bad party; (3) held-out accuracy against ε (the log's `privacy` table) for DP-FedAvg in the
silo and cross-device settings. Which run goes where comes from the labels in the sweep's index.json. A run whose
evaluation logged NaN (its model's embeddings not finite) is shown as "diverged (round N)", N the first such
evaluation's round, and left out of the means (which say how many of their runs diverged)."""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from fedmpi.analysis.fedface_claims import mean_half_range
from fedmpi.analysis.fedface_report import Report
from fedmpi.analysis.fedface_study_table import header
from fedmpi.analysis.plots import panel_grid, save_figure
from fedmpi.analysis.tables import Table, render
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


def accuracy_cell(runs: list[Outcome]) -> str:
    """Mean ± half range over the runs that did not diverge, saying how many did."""
    lost = sum(o.diverged_round is not None for o in runs)
    cell = mean_half_range([o.accuracy for o in runs if o.diverged_round is None])
    return f"{cell} ({lost} of {len(runs)} diverged)" if lost else cell


def fv_table(outcomes: dict) -> Table:
    """Per seed and kind of bad party, FedFace's final w of the bad party vs its clean twin, and the
    held-out accuracy of FedFace and FedAvg in the same seed."""
    rows = []
    for kind in KINDS[1:]:
        for bad in sorted(pick(outcomes, part="bad", layout="3", method="fedface", bad=kind),
                          key=lambda o: o.labels["seed"]):
            seed = bad.labels["seed"]
            twin = next(iter(pick(outcomes, part="bad", layout="3", method="fedface", bad="clean", seed=seed)), None)
            avg = {k: next(iter(pick(outcomes, part="bad", layout="3", method="fedavg", bad=k, seed=seed)), None)
                   for k in (kind, "clean")}
            acc = [o.accuracy if o else math.nan for o in (bad, twin, avg[kind], avg["clean"])]
            rows.append([kind, seed, bad.fv_iterations, bad.final_w, twin.final_w if twin else math.nan,
                         bad.final_w - (twin.final_w if twin else math.nan), bad.fv_slope,
                         twin.fv_slope if twin else math.nan, *acc, acc[0] - acc[2]])
    return Table(header=["bad party", "seed", "FV iterations", "w_bad final", "clean twin", "difference",
                         "d score / d w_bad (points)", "clean twin's",
                         "FedFace acc. %", "FedFace clean %", "FedAvg acc. %", "FedAvg clean %",
                         "FedFace - FedAvg (bad party present)"], rows=rows, digits=3,
                 row_digits=None)


def robust_table(outcomes: dict, layout: str) -> Table:
    """Per rule, held-out accuracy (mean ± half range over seeds) and the bad party's mean influence,
    for the clean twins and each kind of bad party."""
    rows = []
    for method, label in METHOD_LABELS.items():
        found = pick(outcomes, part="bad", layout=layout, method=method)
        if not found:
            continue
        row = [label]
        for kind in KINDS:
            runs = [o for o in found if o.labels["bad"] == kind]
            row += [accuracy_cell(runs),
                    mean_half_range([o.mean_influence for o in runs]) if kind != "clean" else mean_half_range(
                        [o.mean_influence for o in runs])]
        seeds = sorted({o.labels["seed"] for o in found})
        row.append(", ".join(map(str, seeds)))
        rows.append(row)
    head = ["rule"]
    for kind in KINDS:
        head += [f"{kind}: acc. %", f"{kind}: influence of the bad party"]
    return Table(header=[*head, "seeds"], rows=rows)


def per_seed_table(outcomes: dict) -> Table:
    rows = []
    for o in sorted(pick(outcomes, part="bad"), key=lambda o: (o.labels["layout"], list(METHOD_LABELS).index(
            o.labels["method"]), KINDS.index(o.labels["bad"]), o.labels["seed"])):
        rows.append([o.labels["layout"], METHOD_LABELS[o.labels["method"]], o.labels["bad"], o.labels["seed"],
                     o.shown_accuracy, o.mean_influence, float(o.influence[-1]) if o.influence.size else math.nan,
                     o.final_w])
    return Table(header=["parties", "rule", "bad party", "seed", "held-out acc. %", "influence (mean over rounds)",
                         "influence (last round)", "FV w (final)"], rows=rows, digits=3)


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


def dp_table(outcomes: dict) -> Table:
    rows = []
    for p in dp_points(outcomes):
        runs = p["runs"]
        shown = [o.shown_accuracy for o in runs]
        rows.append([p["setting"], p["z"], p["epsilon"], p["clip"],
                     shown[0] if len(runs) == 1 and isinstance(shown[0], str) else accuracy_cell(runs),
                     ", ".join(a if isinstance(a, str) else f"{a:.1f}" for a in shown) if len(runs) > 1 else "",
                     ", ".join(str(o.labels["seed"]) for o in runs)])
    return Table(header=["setting", "noise multiplier z", "ε at δ = 1e-5", "clip (last round)",
                         "held-out acc. % (mean ± half range)", "per seed", "seeds"], rows=rows, digits=4)


def weights_figure(outcomes: dict, path: Path) -> bool:
    kinds = [k for k in KINDS[1:] if pick(outcomes, part="bad", layout="3", method="fedface", bad=k)]
    if not kinds:
        return False
    fig, axes = panel_grid(len(kinds), max_cols=2)
    for ax, kind in zip(axes, kinds):
        for style, k in (("-", kind), (":", "clean")):
            for o in sorted(pick(outcomes, part="bad", layout="3", method="fedface", bad=k),
                            key=lambda o: o.labels["seed"]):
                ax.plot(np.arange(1, o.fv_w.size + 1), o.fv_w, style, color=f"C{o.labels['seed']}",
                        label=f"{k} seed {o.labels['seed']}")
        ax.axhline(1 / 3, color="grey", lw=0.8)
        ax.set_title(f"FedFace, w_ga: {kind} (solid), clean twin (dotted)", fontsize=9)
        ax.set_xlabel("FV iteration")
        ax.set_ylabel("w_ga")
        ax.legend(fontsize=7)
    save_figure(fig, path)
    return True


def accuracy_figure(outcomes: dict, path: Path) -> bool:
    layouts = [lay for lay in ("3", "12") if pick(outcomes, part="bad", layout=lay)]
    if not layouts:
        return False
    fig, axes = panel_grid(len(layouts), max_cols=2, size=(6.4, 3.8))
    for ax, layout in zip(axes, layouts):
        methods = [m for m in METHOD_LABELS if pick(outcomes, part="bad", layout=layout, method=m)]
        for j, kind in enumerate(KINDS):
            for i, m in enumerate(methods):
                values = [o.accuracy for o in pick(outcomes, part="bad", layout=layout, method=m, bad=kind)
                          if o.diverged_round is None]
                if values:
                    ax.bar(i + (j - 1) * 0.27, np.mean(values), 0.27, color=f"C{j}", label=kind if i == 0 else None,
                           yerr=(max(values) - min(values)) / 2)
                    ax.plot([i + (j - 1) * 0.27] * len(values), values, "k.", ms=3)
        ax.set_xticks(range(len(methods)), [METHOD_LABELS[m] for m in methods], rotation=20, fontsize=8)
        ax.set_ylim(45, None)
        sets = sorted({", ".join(o.sets) for o in pick(outcomes, part="bad", layout=layout)})
        ax.set_ylabel(f"held-out accuracy % (mean of {' / '.join(sets)})", fontsize=8)
        ax.set_title(f"{layout} parties, one bad party")
        ax.legend(fontsize=7)
    save_figure(fig, path)
    return True


def privacy_figure(outcomes: dict, path: Path) -> bool:
    groups = {}
    for point in dp_points(outcomes):
        groups.setdefault(point["setting"], []).append(point)
    if not any(len(g) > 1 for g in groups.values()):
        return False
    fig, axes = panel_grid(len(groups), max_cols=2)
    for ax, (setting, points) in zip(axes, groups.items()):
        private = [p for p in points if p["z"] > 0 and p["accuracies"]]     # a diverged run has no accuracy
        ax.semilogx([p["epsilon"] for p in private], [p["accuracy"] for p in private], "o-", label="DP-FedAvg")
        for p in private:
            ax.plot([p["epsilon"]] * len(p["accuracies"]), p["accuracies"], "k.", ms=3)
            ax.annotate(f"z={p['z']:g}", (p["epsilon"], p["accuracy"]), fontsize=7)
        for p in points:
            if not p["accuracies"]:
                ax.annotate(f"z={p['z']:g}: {p['runs'][0].shown_accuracy}", (p["epsilon"], ax.get_ylim()[0]),
                            fontsize=7)
            if p["z"] == 0:
                ax.axhline(p["accuracy"], color="grey", ls="--", label=f"no DP (mean of {len(p['accuracies'])})")
                for a in p["accuracies"]:
                    ax.axhline(a, color="grey", ls=":", lw=0.6)
        ax.set_xlabel("ε at δ = 1e-5 (RDP accountant)")
        ax.set_ylabel("held-out accuracy %")
        ax.set_title(f"{setting}")
        ax.legend(fontsize=7)
    save_figure(fig, path)
    return True


def write_report(folder: Path, out: Path, rationale: str = "", written_by: str = "") -> Path:
    folder, out = Path(folder), Path(out)
    report = Report(folder, out)
    report.lines += header(report, rationale)
    report.lines[0] = f"# A bad party and private aggregation at {report.index['study']['scale']} scale"
    if written_by:
        report.lines[4:4] = [f"This file was written again from the same logs by {written_by}.", ""]
    outcomes = read_outcomes(report)
    names = lambda **labels: [n for n, r in report.rows.items()    # noqa: E731
                              if all(r["labels"].get(k) == v for k, v in labels.items())]

    started = time.monotonic()
    body = [render(fv_table(outcomes), "md")]
    if weights_figure(outcomes, report.figure("fv_weights")):
        body.append(report.png(report.figure("fv_weights"), "FV weight of the bad party"))
    report.section("FV's weight of a bad party, seed by seed (3 parties)",
                   names(part="bad", layout="3", method="fedface") + names(part="bad", layout="3", method="fedavg"),
                   started, body, "the /fv table's w and the /eval table of each FedFace and FedAvg run")

    started = time.monotonic()
    body = []
    for layout in ("3", "12"):
        if pick(outcomes, part="bad", layout=layout):
            body += [f"**{layout} parties**", "", render(robust_table(outcomes, layout), "md")]
    if accuracy_figure(outcomes, report.figure("accuracy")):
        body.append(report.png(report.figure("accuracy"), "accuracy per rule"))
    body += ["", "**Every run**", "", render(per_seed_table(outcomes), "md")]
    report.section("Held-out accuracy and the bad party's influence per rule", names(part="bad"), started,
                   body, "the /eval and /influence tables")

    started = time.monotonic()
    body = [render(dp_table(outcomes), "md")]
    if privacy_figure(outcomes, report.figure("privacy")):
        body.append(report.png(report.figure("privacy"), "privacy-utility"))
    report.section("Privacy-utility curve of DP-FedAvg", names(part="dp"), started, body,
                   "the /privacy and /eval tables")
    return report.write()
