"""Federated Validation's weighting over training (the paper's Fig. 6) and the norm-strategy comparison
(Fig. 5).

Fig. 6 (--fig): for every run with FV iterations in its log, the weighting w per party that each
aggregation used, against the training step: the w after the last FV iteration of round r (/fv w) is drawn at
the step that ends round r (/rounds step); the starting weighting (the first candidate of the first FV
iteration, which is the current w) is drawn at step 0.

Fig. 5 (--norm-fig): the final evaluation accuracy per validation set of FV runs, grouped by method
(FedAvg+FV, PFM+FV, ...) and setting, with one bar per score normalisation (fv.norm in the run's config:
local, moving); repeated runs are averaged. Settings come from --setting, the sweep index, or each run's config.

The table output holds both: the weights per run and party, then (after a blank line) the norm comparison.
"""
from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from fedmpi.store.h5log import EVAL_METRICS
from fedmpi.analysis.find_runs import collect_runs, runs_by_setting
from fedmpi.analysis.methods import method_legend, method_sort_key
from fedmpi.analysis.plots import (add_figure_args, add_pdf_arg, beside_input, figure_legend, grouped_bars, panel_grid, pyplot,
                         save_figure)
from fedmpi.analysis.run_log import AnalysisError, METRIC_NAMES, Run, add_run_args, cli
from fedmpi.analysis.tables import Table, add_table_args, emit, nan_mean, render

NORM_NAMES = {"local": "Local Norm", "moving": "Moving Norm"}
NORM_COLORS = {"local": "#2ca02c", "moving": "#8c564b"}


def weight_trace(run: Run) -> tuple[np.ndarray, np.ndarray]:
    """(steps, w[steps, parties]): the weighting each aggregation used, with the initial one at step 0."""
    fv = run.fv
    if not len(fv.get("round", ())):
        return np.zeros(0, dtype=np.int64), np.zeros((0, len(run.parties)))
    rounds = fv["round"]
    last = np.array([i for i in range(len(rounds)) if i + 1 == len(rounds) or rounds[i + 1] != rounds[i]])
    steps = run.step_of_round(rounds[last])
    w = fv["w"][last]
    if "candidates" in fv:
        steps = np.concatenate([[0], steps])
        w = np.vstack([fv["candidates"][0, 0], w])
    return steps, w


def fv_runs(runs: list[Run]) -> list[Run]:
    chosen = [r for r in runs if len(r.fv.get("round", ()))]
    if not chosen:
        raise AnalysisError("no run has FV iterations in its log (only runs with fv.enabled=true have them)")
    return chosen


def weights_table(runs: list[Run]) -> Table:
    rows = []
    for run in runs:
        steps, w = weight_trace(run)
        for i, party in enumerate(run.parties):
            peak = int(np.argmax(w[:, i]))
            rows.append([run.label, run.method, party, float(w[0, i]), float(w[-1, i]), int(steps[-1]),
                         float(w[peak, i]), int(steps[peak])])
    return Table(header=["Run", "Method", "Party", "w start", "w last", "at step", "w max", "max at step"],
                 rows=rows, digits=4,
                 footnotes=["w: FV's aggregation weight of each party; 'w start' is the weighting before the "
                            "first FV update, 'w last' the one used at the last logged aggregation."])


def weights_figure(runs: list[Run], path: str, pdf: bool = False):
    fig, axes = panel_grid(len(runs), max_cols=2, size=(6.4, 4.0))
    plt = pyplot()
    for run, ax in zip(runs, axes):
        steps, w = weight_trace(run)
        colors = plt.get_cmap("tab10" if len(run.parties) <= 10 else "tab20")
        for i, party in enumerate(run.parties):
            ax.step(steps, w[:, i], where="post", label=party, color=colors(i % colors.N), linewidth=1.6)
        ax.axhline(1 / len(run.parties), color="gray", linestyle="--", linewidth=0.8,
                   label=f"uniform (1/{len(run.parties)})")
        ax.set_title(f"{run.label}: {method_legend(run.method)}, {len(run.parties)} parties")
        ax.set_xlabel("training step")
        ax.set_ylabel("aggregation weight $w_i$")
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, ncol=1 if len(run.parties) <= 8 else 2, title="party", title_fontsize=8,
                  loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle("Federated Validation: each party's aggregation weight over training")
    fig.tight_layout()
    return save_figure(fig, path, pdf)


def norm_results(runs: list[Run], metric: str = "accuracy") -> list[dict]:
    """One entry per (setting, method, norm): {'setting', 'method', 'norm', 'runs', 'sets', 'values' (%)}."""
    out = []
    for setting, members in runs_by_setting(runs).items():
        groups: dict[tuple[str, str], list[Run]] = {}
        for run in members:
            if run.fv_norm and len(run.eval.get("round", ())):
                groups.setdefault((run.base_method, run.fv_norm), []).append(run)
        for (method, norm), group in sorted(groups.items(), key=lambda kv: (method_sort_key(kv[0][0]), kv[0][1])):
            sets = list(dict.fromkeys(s for r in group for s in r.val_sets))
            values = [100 * nan_mean([r.eval_value(s, metric, "final") for r in group]) for s in sets]
            out.append({"setting": setting, "method": method, "norm": norm, "runs": [r.label for r in group],
                        "sets": sets, "values": values})
    return out


def norm_table(results: list[dict], metric: str) -> Table:
    sets = list(dict.fromkeys(s for e in results for s in e["sets"]))
    rows = []
    for e in results:
        by_set = dict(zip(e["sets"], e["values"]))
        rows.append([e["setting"], e["method"], NORM_NAMES.get(e["norm"], e["norm"]), len(e["runs"]),
                     *[by_set.get(s, math.nan) for s in sets]])
    return Table(header=["Setting", "Method", "FV norm", "runs", *sets], rows=rows, digits=2,
                 footnotes=[f"final {METRIC_NAMES.get(metric, metric)} (%) per validation set; runs = runs "
                            "averaged."])


def norm_figure(results: list[dict], metric: str, path: str, pdf: bool = False):
    panels = list(dict.fromkeys((e["setting"], e["method"]) for e in results))
    compared = [p for p in panels if sum((e["setting"], e["method"]) == p for e in results) > 1]
    panels = compared or panels     # panels where both strategies ran, when there are any
    fig, axes = panel_grid(len(panels), max_cols=2, size=(6.0, 4.0))
    for (setting, method), ax in zip(panels, axes):
        entries = [e for e in results if (e["setting"], e["method"]) == (setting, method)]
        sets = list(dict.fromkeys(s for e in entries for s in e["sets"]))
        series = {NORM_NAMES.get(e["norm"], e["norm"]): [dict(zip(e["sets"], e["values"])).get(s, math.nan)
                                                         for s in sets] for e in entries}
        grouped_bars(ax, sets, series, colors={NORM_NAMES[k]: c for k, c in NORM_COLORS.items()},
                     value_fmt="{:.2f}")
        finite = [v for vals in series.values() for v in vals if not math.isnan(v)]
        if finite:
            low, high = min(finite), max(finite)
            pad = max(0.5, (high - low) * 0.25)
            ax.set_ylim(max(0.0, low - pad), min(100.0, high + pad))
        ax.set_title(f"{method_legend(method)} \u2014 {setting}")
        ax.set_xlabel("benchmark")
        ax.set_ylabel(f"final {METRIC_NAMES.get(metric, metric)} (%)")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("FV score normalisation: Local Norm vs Moving Norm (y axis cut to the range of the bars)")
    fig.tight_layout()
    figure_legend(fig, axes, "FV score normalisation")
    return save_figure(fig, path, pdf)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m fedmpi.analysis.weights", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(parser)
    add_table_args(parser)
    add_figure_args(parser, "weights.png", what="the weighting figure (Fig. 6)")
    add_figure_args(parser, "norms.png", name="--norm-fig", what="the norm comparison (Fig. 5)")
    add_pdf_arg(parser)
    parser.add_argument("--metric", default="accuracy", choices=[m for m in EVAL_METRICS if m != "accuracy_std"],
                        help="evaluation metric of the norm comparison (default: accuracy)")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    runs = fv_runs(collect_runs(args.runs, args.setting))
    text = render(weights_table(runs), args.format)
    weights_figure(runs, beside_input(args.fig, args.runs, "weights.png"), args.pdf)
    results = norm_results(runs, args.metric)
    if results:
        text += "\n" + render(norm_table(results, args.metric), args.format)
        norm_figure(results, args.metric, beside_input(args.norm_fig, args.runs, "norms.png"), args.pdf)
        if all(sum((e["setting"], e["method"]) == (f["setting"], f["method"]) for f in results) < 2
               for e in results):
            print("note: no setting and method has runs with both score normalisations; Fig. 5 compares local "
                  "with moving",
                  file=sys.stderr)
    else:
        print("note: no FV run has evaluations; the norm comparison (Fig. 5) is not drawn", file=sys.stderr)
    emit(text, args.out)


if __name__ == "__main__":
    raise SystemExit(cli(main))
