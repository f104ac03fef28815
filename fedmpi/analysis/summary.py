"""Summarise runs side by side: progress, wall time, throughput, training loss per party (last round and
exponentially smoothed), and each validation set's final and best evaluation metrics.

One column per run, one row per quantity. 'final' is the last evaluation logged, 'best' the largest value
over all evaluations (and the step it was reached at). images/s is the whole run's throughput:
sum(images_per_s * round_time) / sum(round_time) over the logged rounds.
"""
from __future__ import annotations

import argparse
import math

import numpy as np

from fedmpi.protocols.report import HEADLINE
from fedmpi.store.h5log import EVAL_METRICS
from fedmpi.analysis.find_runs import collect_runs
from fedmpi.analysis.run_log import CENTRALIZED_PARTY, METRIC_NAMES, Run, UNION_FOOTNOTE, add_run_args, cli, party_row_name
from fedmpi.analysis.tables import Table, add_table_args, elapsed, ema_final, emit, render, throughput

DEFAULT_FACTOR = 0.99


def _gigabytes(run: Run, column: str) -> float | None:
    return float(run.rounds[column].sum()) / 1e9 if column in run.rounds else None


def summary_table(runs: list[Run], factor: float = DEFAULT_FACTOR, metrics=EVAL_METRICS) -> Table:
    rows: list[list] = []
    digits: list[int] = []

    def add(name, values, d=4):
        rows.append([name, *values])
        digits.append(d)

    add("method", [r.method for r in runs])
    add("setting", [", ".join(r.settings) or r.derived_setting for r in runs])
    add("FV norm", [r.fv_norm or "-" for r in runs])
    if any(r.index_entry.get("state") for r in runs):
        add("state (sweep index)", [r.index_entry.get("state") for r in runs])
    add("rounds logged", [len(r.rounds.get("round", ())) for r in runs])
    add("rounds planned", [r.planned_rounds for r in runs])
    add("last step", [int(r.rounds["step"][-1]) if len(r.rounds.get("step", ())) else None for r in runs])
    add("wall time (s)", [elapsed(r.rounds) for r in runs], 1)
    add("images/s", [throughput(r.rounds) for r in runs], 1)
    add("data moved (GB)", [_gigabytes(r, "bytes_moved") for r in runs], 3)
    for column, name in (("bytes_up", "  up: parties -> server"), ("bytes_down", "  down: server -> parties"),
                         ("bytes_intra", "  inside the parties")):
        if any(column in r.rounds for r in runs):
            add(f"{name} (GB)", [_gigabytes(r, column) for r in runs], 3)
    if any(r.fv_enabled for r in runs):
        add("FV iterations", [len(r.fv.get("round", ())) if r.fv_enabled else None for r in runs], 0)
    for party in _union(p for r in runs for p in r.parties):
        last = [_last(r.loss(party)) if party in r.parties else None for r in runs]
        smooth = [ema_final(r.loss(party), factor) if party in r.parties else None for r in runs]
        add(f"loss {party_row_name(party)} (last round)", last)
        add(f"loss {party_row_name(party)} (EMA {factor:g})", smooth)
    for val_set in _union(s for r in runs for s in r.val_sets):
        for metric in (*metrics, *([HEADLINE[val_set]] if val_set in HEADLINE else [])):  # + a benchmark's own
            if not any(f"{val_set}/{metric}" in r.eval for r in runs):
                continue
            name = f"{val_set} {metric}"
            add(f"{name} (final)", [r.eval_value(val_set, metric, "final") for r in runs])
            if metric == "accuracy_std":
                continue
            add(f"{name} (best)", [r.eval_value(val_set, metric, "best") for r in runs])
            add(f"{name} best at step", [_best_step(r, val_set, metric) for r in runs])
    personal = _union(k for r in runs for k in r.personal if k != "round")
    for metric in personal:
        kind = "1:N" if metric.startswith("tpir") else "1:1"
        add(f"personalised {kind} {metric} (final, mean over parties)", [r.personal_value(metric) for r in runs])
        add(f"personalised {kind} {metric} (best)", [r.personal_value(metric, "best") for r in runs])
    footnotes = [f"loss (EMA {factor:g}): s_0 = x_0, s_t = {factor:g} s_(t-1) + {1 - factor:.2g} x_t over the "
                 "rounds' per-party mean loss.",
                 "final = last evaluation logged; best = largest over evaluations; metrics: "
                 + "; ".join(f"{m} = {METRIC_NAMES[m]}" for m in metrics if m in METRIC_NAMES) + "."]
    if any(CENTRALIZED_PARTY in r.parties for r in runs):
        footnotes.append(UNION_FOOTNOTE)
    if personal:
        footnotes.append("personalised: each party's model after its local training (FedFR: + its converter) on "
                         "every party's held-out images, its own identities genuine (docs/BASELINES.md).")
    return Table(header=["", *[r.label for r in runs]], rows=rows, row_digits=digits, footnotes=footnotes)


def _union(items) -> list:
    return list(dict.fromkeys(items))


def _last(values: np.ndarray) -> float:
    values = values[~np.isnan(values)]
    return float(values[-1]) if values.size else math.nan


def _best_step(run: Run, val_set: str, metric: str) -> int | None:
    values = run.eval_metric(val_set, metric)
    if not values.size or np.all(np.isnan(values)):
        return None
    return int(run.eval["step"][int(np.nanargmax(values))])


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m fedmpi.analysis.summary", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(parser)
    add_table_args(parser)
    parser.add_argument("--factor", type=float, default=DEFAULT_FACTOR,
                        help=f"EMA factor of the smoothed loss (default {DEFAULT_FACTOR})")
    parser.add_argument("--metrics", default="accuracy",
                        help=f"comma-separated evaluation metrics to show, or 'all' ({', '.join(EVAL_METRICS)}; "
                             "default: accuracy, with its std over folds)")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    metrics = list(EVAL_METRICS) if metrics == ["all"] else metrics
    if "accuracy" in metrics and "accuracy_std" not in metrics:
        metrics.insert(metrics.index("accuracy") + 1, "accuracy_std")
    unknown = [m for m in metrics if m not in EVAL_METRICS]
    if unknown:
        raise ValueError(f"--metrics: unknown {', '.join(unknown)} (known: {', '.join(EVAL_METRICS)})")
    if not 0 <= args.factor < 1:
        raise ValueError(f"--factor: must be in [0, 1), got {args.factor}")
    runs = collect_runs(args.runs, args.setting)
    emit(render(summary_table(runs, args.factor, metrics), args.format), args.out)


if __name__ == "__main__":
    raise SystemExit(cli(main))
