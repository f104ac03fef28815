"""The results file of the bad-party and privacy study (jobs/badparty_study.py, `python -m jobs.reproduce
badparty`): from the HDF5 logs of the study's sweep folder, (1) FedFace's final FV weight of the bad party seed by
seed against its clean twin, with held-out accuracy of FedFace and FedAvg; (2) held-out accuracy and the bad
party's influence (its effective weight in the round's combination, the log's `influence` table) for every rule,
layout and kind of bad party; (3) held-out accuracy against ε (the log's `privacy` table) for DP-FedAvg in the
silo and cross-device settings; (4) what each defence does against the 10^6-scaled attack: the outcome, how often
the server's upload check excluded the bad party, its update norm against the others' (the /rounds table), FV's
weight and its influence, and the line a stopped run ended with. Which run goes where comes from the labels in the
sweep's index.json. A run whose evaluation logged NaN (its model's embeddings not finite) is shown as "diverged
(round N)", N the first such evaluation's round, and left out of the means (which say how many of their runs
diverged); a run that stopped because its global model diverged as "stopped (round N)"."""
from __future__ import annotations

import math
import time
from pathlib import Path

from fedmpi.analysis.badparty_figures import accuracy_figure, privacy_figure, scaled_figure, weights_figure
from fedmpi.analysis.badparty_outcomes import KINDS, METHOD_LABELS, Outcome, dp_points, pick, read_outcomes  # noqa: F401
from fedmpi.analysis.fedface_claims import mean_half_range
from fedmpi.analysis.fedface_report import Report
from fedmpi.analysis.fedface_study_table import header
from fedmpi.analysis.tables import Table, render


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


def scaled_table(outcomes: dict) -> tuple[Table, list[str]]:
    """Per defence and seed against the 10^6-scaled attack: the outcome next to the same rule's clean twin, the
    rounds the check excluded the bad party in, its update norm over the others' median, FV's final weight of it
    and its influence; and the lines the stopped runs ended with."""
    rows, lines = [], []
    for o in pick(outcomes, part="scaled"):
        labels = o.labels
        twin = next(iter(pick(outcomes, part="bad", layout="3", method=labels["method"], bad="clean",
                              seed=labels["seed"])), None)
        rows.append([labels.get("defence_label") or labels["defence"], labels["check"], labels["seed"],
                     o.shown_accuracy, twin.accuracy if twin else math.nan,
                     f"{o.excluded_rounds} of {o.rounds_logged}", o.norm_ratio, o.largest_ratio, o.final_w,
                     o.mean_influence])
        if o.stopped is not None:
            lines.append(f"- {labels.get('defence_label') or labels['defence']}, seed {labels['seed']}: "
                         f"`{o.stopped}`")
    return Table(header=["defence", "fed.upload_check.action", "seed", "held-out acc. %", "clean twin %",
                         "rounds the bad party was excluded", "its update norm / the others' median (median over "
                         "rounds)", "largest of any party", "FV w_bad (final)", "influence of the bad party (mean)"],
                 rows=rows,
                 digits=3), lines


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
    if pick(outcomes, part="scaled") or names(part="scaled"):
        table, stops = scaled_table(outcomes)
        body = [render(table, "md"), *(["", "Stopped runs, the one line each ended with:", "", *stops] if stops
                                        else [])]
        if scaled_figure(outcomes, report.figure("scaled")):
            body += ["", report.png(report.figure("scaled"), "the 10^6-scaled attack per defence")]
        report.section("The 10^6-scaled attack (3 parties): what each defence does", names(part="scaled"),
                       started, body, "the /rounds, /fv, /influence and /eval tables and the stopped runs' stderr")

    started = time.monotonic()
    body = [render(dp_table(outcomes), "md")]
    if privacy_figure(outcomes, report.figure("privacy")):
        body.append(report.png(report.figure("privacy"), "privacy-utility"))
    report.section("Privacy-utility curve of DP-FedAvg", names(part="dp"), started, body,
                   "the /privacy and /eval tables")
    return report.write()
