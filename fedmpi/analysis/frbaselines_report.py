"""The results file of the face-recognition baselines study (`python -m jobs.reproduce fr-baselines`; the plan is
jobs/frbaselines_study.py): from the HDF5 logs of the study's sweep folder, for each layout (the 3-party one from
scratch; the many small parties from a pretrained start) (1) per method the held-out verification accuracy (the
mean of the pair sets at the final evaluation) and the synthetic IJB-C's TAR@FAR, mean ± half range over the seeds,
with what leaves a party and the bytes of a round, and where the runs evaluated each party's personal model, its
1:1 TAR and 1:N TPIR (the mean over the parties); (2) each method minus the layout's baseline seed by seed; (3) the
curves over training, one line per method (the seeds' mean); then (4) every run, with its rule's own numbers
(FedGC's Reg, FedAwS's spreadout loss, PrivacyFace's clusters released and (ε, δ), FedFR's hard negatives). Which
run is which method and layout comes from the labels in the sweep's index.json."""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from fedmpi.analysis.fedface_claims import mean_half_range
from fedmpi.analysis.fedface_report import Report
from fedmpi.analysis.fedface_study_table import header
from fedmpi.analysis.frbaselines_outcomes import FARS, PERSONAL, Outcome, read_outcomes
from fedmpi.analysis.plots import panel_grid, pyplot, save_figure
from fedmpi.analysis.tables import Table, render

KB = 1e3
LAYOUT_TITLES = {"3": "The 3-party layout, from scratch",
                 "many": "Many small parties from a pretrained start (FedFR's setting)"}


def method_label_of(report: Report, layout: str) -> str:
    """The name of the layout's baseline in tables."""
    baseline = _baseline(report, layout)
    return next((label for key, label in methods_of(report, layout) if key == baseline), baseline)


def layouts_of(report: Report) -> list[str]:
    """The layouts of the study's compared runs, in its order (not the pretraining's)."""
    return list(dict.fromkeys(r["labels"]["layout"] for r in report.rows.values() if r["labels"]["baseline"]))


def methods_of(report: Report, layout: str) -> list[tuple[str, str]]:
    """(method key, label) of one layout, in the study's order."""
    return list(dict.fromkeys((r["labels"]["method"], r["labels"]["label"]) for r in report.rows.values()
                              if r["labels"]["layout"] == layout and r["labels"]["baseline"]))


def _baseline(report: Report, layout: str) -> str:
    return next(r["labels"]["baseline"] for r in report.rows.values() if r["labels"]["layout"] == layout)


def _personal_columns(outcomes: list[Outcome]) -> list[str]:
    return [c for c in PERSONAL if any(c in o.personal for o in outcomes)]


def _mean(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return float(np.mean(values)) if values else math.nan


def methods_table(report: Report, outcomes: dict[str, Outcome], layout: str) -> Table:
    def traffic(key: str) -> dict[str, float]:
        runs = [o for o in outcomes.values() if o.labels["method"] == key]
        return {k: _mean([o.bytes[k] for o in runs]) / KB for k in ("up", "down", "intra")}

    personal = _personal_columns([o for o in outcomes.values() if o.labels["layout"] == layout])
    rows = []
    for key, label in methods_of(report, layout):
        runs = [o for o in outcomes.values() if o.labels["method"] == key]
        if not runs:
            continue
        tars = [mean_half_range([float(o.tar[f][-1]) for o in runs if f in o.tar]) for f in FARS]
        tars += [mean_half_range([o.personal.get(c, math.nan) for o in runs]) for c in personal]
        moved, base = traffic(key), traffic(runs[0].labels["baseline"])
        baseline_runs = [o for o in outcomes.values() if o.labels["method"] == runs[0].labels["baseline"]]
        # beside the baseline only where the same parties upload (not the centralized setting's one party)
        beyond = ([moved["up"] - base["up"], moved["down"] - base["down"]]
                  if baseline_runs and baseline_runs[0].parties == runs[0].parties else ["-", "-"])
        rows.append([label, runs[0].leaves, mean_half_range([o.accuracy for o in runs]), *tars,
                     moved["up"], moved["down"], moved["intra"], *beyond,
                     ", ".join(str(o.labels["seed"]) for o in runs)])
    baseline = _baseline(report, layout)
    names = {"tar_far_1e-2": "personal 1:1 TAR@FAR=1e-2 %", "tpir_far_1e-2": "personal 1:N TPIR@FAR=1e-2 %"}
    notes = (["personal: each party's model after its local training (FedFR: and its converter) on every party's "
              "held-out images, its own identities genuine; the mean over the parties at the final evaluation, then "
              "over the seeds"] if personal else [])
    return Table(header=["method", "what leaves a party", "held-out acc. %", *(f"IJB-C TAR@FAR={f} %" for f in FARS),
                         *(names[c] for c in personal),
                         "KB up / round", "KB down / round", "KB inside the parties / round",
                         f"KB up beyond {baseline}", f"KB down beyond {baseline}", "seeds"],
                 rows=rows, digits=1,
                 footnotes=["accuracy and TAR: mean of the seeds ± half their range, at the final evaluation; "
                            "bytes: the log's traffic columns (every party together), mean over the rounds; beyond "
                            f"{baseline}: what the method moves besides the backbones (its class payload).", *notes])


def paired_table(report: Report, outcomes: dict[str, Outcome], layout: str) -> Table:
    """Each method minus the layout's baseline of the same seed, in points."""
    by = {(o.labels["method"], o.labels["seed"]): o for o in outcomes.values()}
    seeds = sorted({o.labels["seed"] for o in outcomes.values() if o.labels["layout"] == layout})
    personal = _personal_columns([o for o in outcomes.values() if o.labels["layout"] == layout])

    def minus_baseline(key: str, seed: int, value) -> float:
        """value(run) − value(its baseline's run) of the same seed; NaN where either run is missing."""
        run = by.get((key, seed))
        base = by.get((run.labels["baseline"], seed)) if run else None
        return value(run) - value(base) if run and base else math.nan

    def final_tar(o: Outcome) -> float:
        return o.tar[FARS[-1]][-1] if FARS[-1] in o.tar else math.nan

    rows = []
    for key, label in methods_of(report, layout):
        diffs = [minus_baseline(key, s, lambda o: o.accuracy) for s in seeds]
        tar = [minus_baseline(key, s, final_tar) for s in seeds]
        own = [[minus_baseline(key, s, lambda o, c=c: o.personal.get(c, math.nan)) for s in seeds] for c in personal]
        rows.append([label, *diffs, mean_half_range(diffs), mean_half_range(tar), *map(mean_half_range, own)])
    baseline = _baseline(report, layout)
    return Table(header=["method", *(f"seed {s}: acc. − {baseline}" for s in seeds), "mean ± half range",
                         f"IJB-C TAR@FAR={FARS[-1]} − {baseline}",
                         *(f"personal {c.split('_')[0].upper()}@1e-2 − {baseline}" for c in personal)],
                 rows=rows, digits=2,
                 footnotes=["percentage points; the same seed means the same initialisation and data order."])


def runs_table(outcomes: dict[str, Outcome]) -> Table:
    rows = []
    for name, o in outcomes.items():
        rows.append([name, o.labels["label"], o.labels["seed"], o.accuracy,
                     *(float(o.tar[f][-1]) if f in o.tar else math.nan for f in FARS),
                     ", ".join(f"{s} {v:.1f}" for s, v in o.per_set.items()), o.own])
    return Table(header=["run", "method", "seed", "held-out acc. %", *(f"IJB-C TAR@{f} %" for f in FARS),
                         "per set (%)", "the rule's own (first -> last round)"], rows=rows, digits=3)


def curves_figure(report: Report, outcomes: dict[str, Outcome], layout: str, path: Path) -> bool:
    """Held-out accuracy and IJB-C TAR@FAR over training, one line per method of the layout (mean of its seeds):
    against the training step, or the round where the layout's methods take rounds of different lengths (FedFR's
    epochs against FedAvg's K); a method sharing another's colour is dashed."""
    plt = pyplot()
    fig, (acc, tar) = panel_grid(2, max_cols=2, size=(6.0, 4.2))
    curves = [o for o in outcomes.values() if o.labels["layout"] == layout and o.curve.size]
    by_round = len({float(o.steps[-1] / (o.rounds[-1] + 1)) for o in curves}) > 1
    drawn, colors = False, set()
    for key, label in methods_of(report, layout):
        runs = [o for o in curves if o.labels["method"] == key]
        if not runs:
            continue
        n = min(o.curve.size for o in runs)
        x, color = (runs[0].rounds[:n] + 1 if by_round else runs[0].steps[:n]), runs[0].color
        style = dict(marker="o", markersize=3, label=label, color=color, linestyle="--" if color in colors else "-")
        colors.add(color)
        acc.plot(x, np.mean([o.curve[:n] for o in runs], axis=0), **style)
        if all(FARS[-1] in o.tar for o in runs):
            tar.plot(x, np.mean([o.tar[FARS[-1]][:n] for o in runs], axis=0), **style)
        drawn = True
    if not drawn:
        plt.close(fig)
        return False
    acc.set_title("held-out verification accuracy (mean of the pair sets)", fontsize=10)
    acc.set_ylabel("accuracy (%)")
    tar.set_title(f"synthetic IJB-C, TAR at FAR = {FARS[-1]}", fontsize=10)
    tar.set_ylabel("TAR (%)")
    for ax in (acc, tar):
        ax.set_xlabel("round" if by_round else "training step")
        ax.grid(alpha=0.3)
    acc.legend(fontsize=8)
    fig.suptitle(f"{LAYOUT_TITLES.get(layout, layout)}: each method, the mean of its seeds", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)
    return True


def write_report(folder: Path, out: Path, rationale: str = "", written_by: str = "") -> Path:
    folder, out = Path(folder), Path(out)
    report = Report(folder, out)
    report.lines += header(report, rationale)
    report.lines[0] = (f"# The field's face-recognition baselines beside FedFace at {report.index['study']['scale']} "
                       "scale")
    if written_by:
        report.lines[4:4] = [f"This file was written again from the same logs by {written_by}.", ""]
    outcomes = read_outcomes(report)
    for layout in layouts_of(report):
        names = [n for n, o in outcomes.items() if o.labels["layout"] == layout]
        title = LAYOUT_TITLES.get(layout, f"Layout {layout}")
        started = time.monotonic()
        report.section(f"{title}: held-out verification, IJB-C, personal models and traffic per method", names,
                       started, [render(methods_table(report, outcomes, layout), "md")],
                       "the /eval, /personal and /rounds tables, the log's leaves_party")
        started = time.monotonic()
        body = [render(paired_table(report, outcomes, layout), "md")]
        stem = "curves" if layout == "3" else f"curves_{layout}"
        if curves_figure(report, outcomes, layout, report.figure(stem)):
            body.append(report.png(report.figure(stem), stem))
        report.section(f"{title}: seed by seed against {method_label_of(report, layout)}, and over training", names,
                       started, body, "the /eval and /personal tables of runs of the same seed")
    started = time.monotonic()
    report.section("Every run", list(outcomes), started, [render(runs_table(outcomes), "md")],
                   "the /eval, /classes and /local tables")
    return report.write()
