"""`python -m fedmpi.analysis.hsu_partition [--alpha 100 1 0.1 0] [--clients 30] [--fig F.png]` or
`python -m fedmpi.analysis.hsu_partition --log RUN/log.h5 ...`: the client x class histogram of Hsu et al.'s partition
(their Fig. 1): one panel per alpha, a stacked bar per client showing its class mix.

Without --log the partition is drawn for CIFAR-10's labels (10 classes of 5,000) with the population of the
config (--population, --images, --seed) and the first --clients clients are shown; with --log, the histogram the
run logged (/data attrs 'clients')."""
from __future__ import annotations

import argparse
import json
import numpy as np

from fedmpi.data.partition import client_class_histogram, hsu_partition
from fedmpi.store.h5log import LogReader
from fedmpi.analysis.plots import add_pdf_arg, beside_input, panel_grid, save_figure
from fedmpi.analysis.run_log import AnalysisError, cli


def drawn_histograms(alphas, population: int, images: int, seed: int) -> dict[str, np.ndarray]:
    labels = np.repeat(np.arange(10), 5000)
    return {f"α = {a:g}": client_class_histogram(hsu_partition(labels, population, images, a, seed), labels, 10)
            for a in alphas}


def logged_histograms(logs) -> dict[str, np.ndarray]:
    out = {}
    for path in logs:
        with LogReader(path) as log:
            described = log.f["data"].attrs.get("clients")
            if described is None:
                raise AnalysisError(f"{path}: not a cross-device run (no client histogram in /data)")
            clients = json.loads(described)
        out[f"α = {clients['alpha']:g} (seed {clients['seed']})"] = np.array(clients["histogram"])
    return out


def draw(histograms: dict[str, np.ndarray], shown: int, path, pdf: bool) -> None:
    fig, axes = panel_grid(len(histograms), max_cols=len(histograms), size=(4.0, 3.0))
    colours = __import__("matplotlib").colormaps["tab10"].colors
    for ax, (title, h) in zip(axes, histograms.items()):
        h = h[:shown] / h[:shown].sum(axis=1, keepdims=True)
        bottom = np.zeros(len(h))
        for c in range(h.shape[1]):
            ax.bar(np.arange(len(h)), h[:, c], bottom=bottom, width=1.0, color=colours[c % 10], linewidth=0)
            bottom += h[:, c]
        ax.set_title(title)
        ax.set_xlabel("client")
        ax.set_ylim(0, 1)
        ax.set_xlim(-0.5, len(h) - 0.5)
    axes[0].set_ylabel("class distribution")
    save_figure(fig, path, pdf)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m fedmpi.analysis.hsu_partition", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--alpha", type=float, nargs="+", default=[100.0, 1.0, 0.1, 0.0])
    parser.add_argument("--population", type=int, default=100)
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log", nargs="+", default=None, help="draw the histograms these run logs hold")
    parser.add_argument("--clients", type=int, default=30, help="clients shown per panel (default 30)")
    parser.add_argument("--fig", default=None, help="PNG to write (default: hsu_partition.png beside the first "
                                                    "--log, else in the current folder)")
    add_pdf_arg(parser)
    args = parser.parse_args(argv)
    histograms = logged_histograms(args.log) if args.log else drawn_histograms(args.alpha, args.population,
                                                                               args.images, args.seed)
    draw(histograms, args.clients, beside_input(args.fig, args.log or ["."], "hsu_partition.png"), args.pdf)


if __name__ == "__main__":
    raise SystemExit(cli(main))
