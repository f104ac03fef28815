"""`python -m fedmpi.analysis.hsu_lr SWEEP [--fig F.png]`: test accuracy against the effective learning rate
eta_eff = eta / (1 - beta) (Hsu et al., Sec. 4.2), one line per server momentum beta (beta = 0: FedAvg), one
panel per (E, C, alpha) of the sweep; each point the mean over seeds."""
from __future__ import annotations

import argparse
from collections import defaultdict

from fedmpi.analysis.methods import method_label
from fedmpi.analysis.plots import add_figure_args, add_pdf_arg, beside_input, figure_legend, panel_grid, save_figure
from fedmpi.analysis.run_log import cli
from fedmpi.analysis.hsu_results import load_results, mean_over_seeds


def curves(results) -> dict[tuple, dict[float, list[tuple[float, float]]]]:
    """(E, C, alpha) -> beta -> [(eta_eff, mean accuracy)] sorted by eta_eff."""
    out = defaultdict(lambda: defaultdict(list))
    for (algorithm, beta, E, C, alpha, lr), (accuracy, *_) in mean_over_seeds(results).items():
        out[(E, C, alpha)][beta].append((lr / (1 - beta), accuracy))
    return {panel: {b: sorted(points) for b, points in sorted(lines.items())} for panel, lines in out.items()}


def line_labels(results) -> dict[float, str]:
    """beta -> the legend of its line: the rule's label (FedAvg at beta = 0, FedAvgM above) and beta."""
    rules = {beta: algorithm for (algorithm, beta, *_), _ in mean_over_seeds(results).items()}
    return {beta: f"{method_label(rule)[0]} " + ("(β=0)" if beta == 0 else f"β={beta:g}")
            for beta, rule in rules.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m fedmpi.analysis.hsu_lr", description=__doc__)
    parser.add_argument("sweep", help="an hsu sweep folder (its index.json)")
    add_figure_args(parser, default="", what="the figure (default: SWEEP/hsu_lr.png)")
    add_pdf_arg(parser)
    args = parser.parse_args(argv)
    results = load_results(args.sweep)
    data, labels = curves(results), line_labels(results)
    panels = sorted(data, key=lambda p: (p[0], -p[1], -p[2]))
    fig, axes = panel_grid(len(panels), max_cols=4, size=(4.2, 3.2))
    etas = [x for lines in data.values() for points in lines.values() for x, _ in points]
    for ax, (E, C, alpha) in zip(axes, panels):
        for k, (beta, points) in enumerate(data[(E, C, alpha)].items()):
            x, y = zip(*points)
            ax.plot(x, y, marker="osD^v"[k % 5], markersize=9 - 2 * (k % 3), fillstyle="full" if k else "none",
                    label=labels[beta])   # markers of their own: rules at equal eta_eff sit on one abscissa
        ax.set_xscale("log")
        ax.set_xlim(min(etas) / 2, max(etas) * 2)   # a grid of one eta_eff still gets an axis
        ax.set_ylim(0, 1)
        ax.set_title(f"E={E}  C={C:g}  α={alpha:g}", fontsize=9)
        ax.set_xlabel("η_eff = η / (1 − β)")
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3)
    figure_legend(fig, axes, "server momentum")
    save_figure(fig, beside_input(args.fig, [args.sweep], "hsu_lr.png"), args.pdf)


if __name__ == "__main__":
    raise SystemExit(cli(main))
