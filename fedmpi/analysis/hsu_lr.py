"""`python -m fedmpi.analysis.hsu_lr SWEEP [--fig F.png]`: test accuracy against the effective learning rate
eta_eff = eta / (1 - beta) (Hsu et al., Sec. 4.2, Fig. 5), one line per server momentum beta (beta = 0: FedAvg),
one panel per (E, C, alpha) of the sweep. Each line is the mean over the seeds every setting ran (a study that
tunes on one seed and runs the best settings on more, jobs/hsu_study.py: the tuning seed's curve); where a point
ran more seeds, its mean over them is drawn with a bar of ± half their range."""
from __future__ import annotations

import argparse
from collections import defaultdict

from fedmpi.analysis.methods import method_label
from fedmpi.analysis.plots import add_figure_args, add_pdf_arg, beside_input, figure_legend, panel_grid, save_figure
from fedmpi.analysis.run_log import cli
from fedmpi.analysis.hsu_results import load_results, mean_over_seeds


def common_seeds(results) -> set[int]:
    """The seeds every setting of the sweep ran."""
    seeds = defaultdict(set)
    for r in results:
        seeds[(r.algorithm, r.beta, r.epochs, r.fraction, r.alpha, r.lr)].add(r.seed)
    return set.intersection(*seeds.values()) if seeds else set()


def curves(results) -> dict[tuple, dict[float, list[tuple[float, float]]]]:
    """(E, C, alpha) -> beta -> [(eta_eff, mean accuracy over the common seeds)] sorted by eta_eff."""
    common = common_seeds(results)
    out = defaultdict(lambda: defaultdict(list))
    for (algorithm, beta, E, C, alpha, lr), (accuracy, *_) in mean_over_seeds(
            [r for r in results if r.seed in common]).items():
        out[(E, C, alpha)][beta].append((lr / (1 - beta), accuracy))
    return {panel: {b: sorted(points) for b, points in sorted(lines.items())} for panel, lines in out.items()}


def seeded_points(results) -> dict[tuple, dict[float, list[tuple[float, float, float]]]]:
    """(E, C, alpha) -> beta -> [(eta_eff, mean, half range)] of the points that ran more seeds than the others."""
    common = len(common_seeds(results))
    out = defaultdict(lambda: defaultdict(list))
    for (algorithm, beta, E, C, alpha, lr), (accuracy, seeds, spread) in mean_over_seeds(results).items():
        if seeds > common:
            out[(E, C, alpha)][beta].append((lr / (1 - beta), accuracy, spread))
    return out


def line_labels(results) -> dict[float, str]:
    """beta -> the legend of its line: the rule's label (FedAvg at beta = 0, FedAvgM above) and beta."""
    rules = {beta: algorithm for (algorithm, beta, *_), _ in mean_over_seeds(results).items()}
    return {beta: f"{method_label(rule)[0]} " + ("(β=0)" if beta == 0 else f"β={beta:g}")
            for beta, rule in rules.items()}


def draw(results, path, pdf: bool = False) -> list:
    """The figure of `results` at `path` (and a PDF beside it)."""
    data, labels, seeded = curves(results), line_labels(results), seeded_points(results)
    common = sorted(common_seeds(results))
    panels = sorted(data, key=lambda p: (p[0], -p[1], -p[2]))
    fig, axes = panel_grid(len(panels), max_cols=len({p[2] for p in panels}) or 1, size=(4.2, 3.7))
    etas = [x for lines in data.values() for points in lines.values() for x, _ in points]
    for ax, panel in zip(axes, panels):
        for k, (beta, points) in enumerate(data[panel].items()):
            x, y = zip(*points)
            line, = ax.plot(x, y, marker="osD^v"[k % 5], markersize=9 - 2 * (k % 3),
                            fillstyle="full" if k else "none", label=labels[beta])   # markers of their own: rules
            for eta, mean, spread in seeded.get(panel, {}).get(beta, []):         # at equal eta_eff share x
                ax.errorbar([eta * (1 + 0.06 * (k - 1))], [mean], yerr=[spread], color=line.get_color(),
                            marker="_", markersize=14, capsize=3, linewidth=1.5)
        ax.set_xscale("log")
        ax.set_xlim(min(etas) / 2, max(etas) * 2)   # a grid of one eta_eff still gets an axis
        ax.set_ylim(0, 1)
        E, C, alpha = panel
        ax.set_title(f"E={E}  C={C:g}  α={alpha:g}", fontsize=9)
        ax.set_xlabel("η_eff = η / (1 − β)")
        ax.set_ylabel("test accuracy" + (f" (seed {common[0]})" if len(common) == 1 and seeded else ""))
        ax.grid(alpha=0.3)
    figure_legend(fig, axes, "server momentum" + (": lines one seed; bars the best η_eff's mean ± half range over "
                                                   "the seeds" if seeded else ""))
    return save_figure(fig, path, pdf)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m fedmpi.analysis.hsu_lr", description=__doc__)
    parser.add_argument("sweep", help="an hsu sweep folder (its index.json)")
    add_figure_args(parser, default="", what="the figure (default: SWEEP/hsu_lr.png)")
    add_pdf_arg(parser)
    args = parser.parse_args(argv)
    draw(load_results(args.sweep), beside_input(args.fig, [args.sweep], "hsu_lr.png"), args.pdf)


if __name__ == "__main__":
    raise SystemExit(cli(main))
