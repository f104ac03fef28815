"""The paper's Fig. 4: each method's evaluation result minus the centralized baseline's, per benchmark
(validation set), as grouped bars, one panel per setting.

Runs are grouped into settings by --setting NAME=GLOB, else by the sweep index's setting field, else by the
setting their config implies ('IR-18-AF, 3-party, K=100'); in that last case a centralized run is the baseline
of every setting with its backbone, head and party count (K does not change the centralized baseline).
Metrics are logged as fractions; differences are shown in percentage points. Repeated runs of one method in
one setting are averaged (the paper averages its two FV runs). A panel is titled by its setting; a short
setting name (the sweep's 'a'..'f') is followed by the setting its runs' config implies.

The default metric, `headline`, is each benchmark's column in the paper: held-out accuracy for the pair sets,
TAR at FAR = 1e-4 on IJB-B, TAR at FAR = 1e-5 on IJB-C, rank-1 identification on MegaFace (eval.sets) - the
eight columns of Fig. 4 when a run evaluates all of them.
"""
from __future__ import annotations

import argparse
import math
import string
import sys

from fedmpi.algorithms.registry import SINGLE_PARTY_SETTINGS
from fedmpi.analysis.methods import method_label
from fedmpi.protocols import BENCHMARKS, metric_names
from fedmpi.protocols.report import HEADLINE
from fedmpi.store.h5log import EVAL_METRICS
from fedmpi.analysis.find_runs import collect_runs, runs_by_setting
from fedmpi.analysis.methods import method_color, method_sort_key
from fedmpi.analysis.plots import (add_figure_args, add_pdf_arg, beside_input, figure_legend, grouped_bars, panel_grid,
                         save_figure)
from fedmpi.analysis.run_log import AnalysisError, METRIC_NAMES, Run, add_run_args, cli
from fedmpi.analysis.tables import Table, add_table_args, emit, nan_mean, render

BASELINE = method_label("centralized")[0]
EXCLUDED = tuple(method_label(setting)[0] for setting in SINGLE_PARTY_SETTINGS)
HEADLINE_METRIC = "headline"


def metric_of(val_set: str, metric: str) -> str:
    """The logged metric a set contributes: under 'headline' each benchmark's paper metric, else `metric`."""
    return HEADLINE.get(val_set, "accuracy") if metric == HEADLINE_METRIC else metric


def relative_results(runs: list[Run], metric: str = HEADLINE_METRIC, at: str = "final",
                     methods=None) -> list[dict]:
    """One entry per (setting, method): {'setting', 'method', 'runs', 'baseline', 'sets', 'values'} where
    values[i] = 100 * (mean metric of the method's runs - mean metric of the baseline runs) on sets[i]."""
    out, missing = [], []
    for setting, members in runs_by_setting(runs).items():
        compared = [r for r in members if (r.method in methods if methods else r.method not in EXCLUDED)]
        if not compared:
            continue
        base = [r for r in members if r.method == BASELINE]
        if not base:
            missing.append(setting)
            continue
        sets = list(dict.fromkeys(s for r in [*base, *compared] for s in r.val_sets))
        base_value = {s: nan_mean([r.eval_value(s, metric_of(s, metric), at) for r in base]) for s in sets}
        for method in sorted({r.method for r in compared}, key=method_sort_key):
            group = [r for r in compared if r.method == method]
            values = [100 * (nan_mean([r.eval_value(s, metric_of(s, metric), at) for r in group]) - base_value[s])
                      for s in sets]
            out.append({"setting": setting, "method": method, "runs": [r.label for r in group],
                        "baseline": [r.label for r in base], "sets": sets, "values": values,
                        "caption": compared[0].derived_setting})
    if missing:
        text = f"no centralized run (algorithm centralized) to compare with in setting(s): {', '.join(missing)}"
        if not out:
            raise AnalysisError(text)
        print(f"note: left out setting(s) with no centralized run to compare with: {', '.join(missing)}",
              file=sys.stderr)
    if not out:
        raise AnalysisError("no run to compare with a centralized baseline (methods other than "
                            f"{', '.join(EXCLUDED)})")
    return out


def relative_table(results: list[dict], metric: str, at: str) -> Table:
    sets = list(dict.fromkeys(s for e in results for s in e["sets"]))
    rows = []
    for e in results:
        by_set = dict(zip(e["sets"], e["values"]))
        values = [by_set.get(s, math.nan) for s in sets]
        rows.append([e["setting"], e["method"], len(e["runs"]), *values, nan_mean(values)])
    notes = [f"{at} {METRIC_NAMES.get(metric, metric)} minus the centralized baseline's, in percentage points "
             "(100 x difference of fractions); runs = runs averaged. Baselines: "
             + "; ".join(sorted({f"{e['setting']}: {', '.join(e['baseline'])}" for e in results})) + "."]
    return Table(header=["Setting", "Method", "runs", *sets, "mean"], rows=rows, digits=2, footnotes=notes)


def relative_figure(results: list[dict], metric: str, at: str, path: str, pdf: bool = False):
    settings = list(dict.fromkeys(e["setting"] for e in results))
    fig, axes = panel_grid(len(settings), max_cols=3, size=(6.0, 4.2))
    for letter, setting, ax in zip(string.ascii_lowercase, settings, axes):
        entries = [e for e in results if e["setting"] == setting]
        sets = list(dict.fromkeys(s for e in entries for s in e["sets"]))
        series = {e["method"]: [dict(zip(e["sets"], e["values"])).get(s, math.nan) for s in sets] for e in entries}
        grouped_bars(ax, sets, series, colors={m: method_color(m) for m in series})
        ax.axhline(0, color="black", linewidth=0.8)
        caption = entries[0]["caption"]
        short = len(setting) <= 2 and setting != caption
        ax.set_title(f"({setting}) {caption}" if short else f"({letter}) {setting}")
        ax.set_xlabel("benchmark")
        ax.set_ylabel(f"{METRIC_NAMES.get(metric, metric)}\nminus centralized (percentage points)")
        ax.grid(axis="y", alpha=0.3)
        ax.margins(y=0.15)
    fig.suptitle(f"Each method's {at} {METRIC_NAMES.get(metric, metric)} relative to the centralized baseline "
                 "(above 0: better than centralized)")
    fig.tight_layout()
    figure_legend(fig, axes, "method")
    return save_figure(fig, path, pdf)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m fedmpi.analysis.relative", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(parser)
    add_table_args(parser)
    add_figure_args(parser, "relative.png")
    add_pdf_arg(parser)
    metrics = dict.fromkeys([HEADLINE_METRIC, *(m for m in EVAL_METRICS if m != "accuracy_std"),
                             *(m for name in BENCHMARKS for m in metric_names(name))])
    parser.add_argument("--metric", default=HEADLINE_METRIC, choices=list(metrics),
                        help="evaluation metric (default: headline, each benchmark's metric in the paper)")
    parser.add_argument("--at", default="final", choices=("final", "best"),
                        help="the last evaluation of each run, or its best (default: final)")
    parser.add_argument("--methods", help="comma-separated methods to compare (default: every method but "
                                          "Centralized and Solo)")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else None
    runs = collect_runs(args.runs, args.setting)
    results = relative_results(runs, args.metric, args.at, methods)
    emit(render(relative_table(results, args.metric, args.at), args.format), args.out)
    relative_figure(results, args.metric, args.at, beside_input(args.fig, args.runs, "relative.png"), args.pdf)


if __name__ == "__main__":
    raise SystemExit(cli(main))
