"""Training curves of one or more runs: each party's training loss, each party's update norm ‖θ_i − Θ‖ (where the
logs have it: a party drifting away from the others shows there before it breaks anything), and the held-out
evaluation metric of each validation set, against the training step.

The loss panel shows every round's per-party mean loss (faint) and its exponential smoothing
s_t = f s_(t-1) + (1 - f) x_t, s_0 = x_0 (--smooth f; 0 draws the per-round values only). A centralized run
logs one loss over the union of all parties' data ('union'). One run: one colour per party; several runs:
one colour per run, one line style per party. --data writes the plotted series as CSV.
"""
from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

import numpy as np

from fedmpi.store.h5log import EVAL_METRICS
from fedmpi.analysis.find_runs import collect_runs
from fedmpi.analysis.plots import add_figure_args, add_pdf_arg, beside_input, figure_legend, panel_grid, pyplot, save_figure
from fedmpi.analysis.run_log import AnalysisError, CENTRALIZED_PARTY, METRIC_NAMES, Run, add_run_args, cli
from fedmpi.analysis.tables import ema

LINE_STYLES = ("-", "--", ":", "-.")
DEFAULT_SMOOTH = 0.8


def party_label(party: str) -> str:
    return "union" if party == CENTRALIZED_PARTY else party


def loss_series(run: Run, factor: float) -> list[dict]:
    """Per party: {'run', 'panel': 'loss', 'series': party, 'steps', 'values', 'smoothed'}."""
    steps = run.rounds.get("step", np.zeros(0, dtype=np.int64))
    out = []
    for party in run.parties:
        values = run.loss(party)
        if values.size and np.all(np.isnan(values)):
            continue     # a party the run never trained (a solo run that logs every party)
        out.append({"run": run.label, "panel": "loss", "series": party_label(party), "steps": steps,
                    "values": values, "smoothed": ema(values, factor) if factor > 0 else values})
    return out


def norm_series(run: Run) -> list[dict]:
    """Per party with a measured update norm: {'run', 'panel': 'update_norm', 'series': party, 'steps', 'values'}."""
    steps = run.rounds.get("step", np.zeros(0, dtype=np.int64))
    out = []
    for party in run.parties:
        values = run.update_norm(party)
        if values.size and np.isfinite(values).any():
            values = np.where(np.isfinite(values), values, np.nan)     # a non-finite upload: a gap (and excluded)
            out.append({"run": run.label, "panel": "update_norm", "series": party_label(party), "steps": steps,
                        "values": values, "smoothed": values})
    return out


def metric_series(run: Run, val_set: str, metric: str) -> dict:
    """{'run', 'panel': set, 'series': metric, 'steps', 'values' (%)} of one validation set."""
    values = run.eval_metric(val_set, metric)
    return {"run": run.label, "panel": val_set, "series": metric, "steps": run.eval.get("step", np.zeros(0)),
            "values": 100 * values, "smoothed": 100 * values}


def curves_figure(runs: list[Run], sets: list[str], metric: str, factor: float, path: str, pdf: bool = False):
    plt = pyplot()
    norms = [norm_series(run) for run in runs]
    drawn = 1 + any(norms)
    fig, axes = panel_grid(drawn + len(sets), max_cols=3, size=(5.6, 4.0))
    loss_ax, set_axes = axes[0], axes[drawn:]
    norm_ax = axes[1] if drawn == 2 else None
    run_colors = plt.get_cmap("tab10")
    for k, run in enumerate(runs):
        series = loss_series(run, factor)
        party_colors = plt.get_cmap("tab10" if len(series) <= 10 else "tab20")
        for j, s in enumerate(series):
            color = party_colors(j % party_colors.N) if len(runs) == 1 else run_colors(k % 10)
            style = "-" if len(runs) == 1 else LINE_STYLES[j % len(LINE_STYLES)]
            label = s["series"] if len(runs) == 1 else f"{run.label} \u00b7 {s['series']}"
            if factor > 0:
                loss_ax.plot(s["steps"], s["values"], color=color, alpha=0.25, linewidth=0.8, linestyle=style)
            loss_ax.plot(s["steps"], s["smoothed"], color=color, linestyle=style, linewidth=1.6, label=label)
            drift = next((n for n in norms[k] if n["series"] == s["series"]), None)
            if norm_ax is not None and drift is not None:
                norm_ax.plot(drift["steps"], drift["values"], color=color, linestyle=style, marker=".", label=label)
        for val_set, ax in zip(sets, set_axes):
            s = metric_series(run, val_set, metric)
            ax.plot(s["steps"], s["values"], marker="o", markersize=3, color=run_colors(k % 10), label=run.label)
    smooth_text = f"lines: EMA {factor:g}, faint: per round" if factor > 0 else "per-round mean"
    loss_ax.set_title(f"training loss per party ({smooth_text})", fontsize=10)
    loss_ax.set_xlabel("training step")
    loss_ax.set_ylabel("training loss")
    loss_ax.grid(alpha=0.3)
    loss_ax.legend(fontsize=7, title="run \u00b7 party" if len(runs) > 1 else "party", title_fontsize=7)
    if norm_ax is not None:
        norm_ax.set_yscale("log")
        norm_ax.set_title("update norm ‖θ_i − Θ‖ per party (the server's check)", fontsize=10)
        norm_ax.set_xlabel("training step")
        norm_ax.set_ylabel("‖θ_i − Θ‖")
        norm_ax.grid(alpha=0.3)
    for val_set, ax in zip(sets, set_axes):
        ax.set_title(f"held-out {val_set}", fontsize=10)
        ax.set_xlabel("training step")
        ax.set_ylabel(f"{METRIC_NAMES.get(metric, metric)} (%)")
        ax.grid(alpha=0.3)
    title = f"Training curves of {runs[0].label}" if len(runs) == 1 else f"Training curves of {len(runs)} runs"
    fig.suptitle(title)
    fig.tight_layout()
    if len(runs) > 1:
        figure_legend(fig, set_axes, "run (colour)")
    return save_figure(fig, path, pdf)


def write_series(runs: list[Run], sets: list[str], metric: str, factor: float, path: str) -> None:
    """The plotted data as long CSV: run, panel (loss, update_norm or a validation set), series, step, value,
    smoothed."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["run", "panel", "series", "step", "value", "smoothed"])
        for run in runs:
            for s in [*loss_series(run, factor), *norm_series(run), *(metric_series(run, v, metric) for v in sets)]:
                for step, value, smoothed in zip(s["steps"], s["values"], s["smoothed"]):
                    writer.writerow([s["run"], s["panel"], s["series"], int(step), _num(value), _num(smoothed)])


def _num(value) -> str:
    return "" if math.isnan(value) else f"{float(value):.10g}"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m fedmpi.analysis.curves", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(parser, settings=False)
    add_figure_args(parser, "curves.png")
    add_pdf_arg(parser)
    parser.add_argument("--smooth", type=float, default=DEFAULT_SMOOTH,
                        help=f"EMA factor of the loss lines, in [0, 1) (default {DEFAULT_SMOOTH}; 0: none)")
    parser.add_argument("--sets", help="comma-separated validation sets to plot (default: every set logged)")
    parser.add_argument("--metric", default="accuracy", choices=[m for m in EVAL_METRICS if m != "accuracy_std"],
                        help="held-out metric (default: accuracy)")
    parser.add_argument("--data", metavar="CSV", help="also write the plotted series to this CSV file")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if not 0 <= args.smooth < 1:
        raise ValueError(f"--smooth: must be in [0, 1), got {args.smooth}")
    runs = collect_runs(args.runs)
    logged = list(dict.fromkeys(s for r in runs for s in r.val_sets))
    sets = [s.strip() for s in args.sets.split(",") if s.strip()] if args.sets else logged
    unknown = [s for s in sets if s not in logged]
    if unknown:
        raise AnalysisError(f"--sets: {', '.join(unknown)} not in the logs (logged: {', '.join(logged) or 'none'})")
    curves_figure(runs, sets, args.metric, args.smooth, beside_input(args.fig, args.runs, "curves.png"), args.pdf)
    if args.data:
        write_series(runs, sets, args.metric, args.smooth, args.data)


if __name__ == "__main__":
    raise SystemExit(cli(main))
