"""`python -m fedmpi.analysis.hsu_table SWEEP [--format text|md|csv] [--out FILE]`: Hsu et al.'s Table 1 from an hsu sweep.

Rows: reporting fraction C (largest first), columns: alpha (largest first), one panel per local epochs E. Each
cell is the final test accuracy of the best setting, averaged over the population seeds (± half the range over
the seeds, with two or more): FedAvg's best client lr, and FedAvgM's best (client lr, beta), each chosen by its
mean over the seeds every setting of the cell ran (a study that tunes on one seed: that seed's). FedAvg and FedAvgM side by side as "FedAvg / FedAvgM" (text, md) or as two columns per alpha (csv).
Then, per (E, C), the same at equal effective learning rate eta_eff = eta / (1 - beta): rows eta_eff, each cell
FedAvg at lr eta_eff against FedAvgM at lr eta_eff (1 - beta), where the sweep ran both."""
from __future__ import annotations

import argparse

from fedmpi.algorithms.registry import RULES
from fedmpi.analysis.methods import method_label
from fedmpi.analysis.hsu_results import best_settings, cell, load_results, mean_over_seeds
from fedmpi.analysis.run_log import cli
from fedmpi.analysis.tables import Table, add_table_args, emit, render



def label(algorithm: str) -> str:
    return method_label(algorithm)[0]


def best_cells(results) -> dict[tuple, tuple[float, float, float, int, float]]:
    """(algorithm, E, C, alpha) -> (seed-mean accuracy, lr, beta, seeds, seed spread) of the best setting
    (hsu_results.best_settings: chosen on the seeds every setting ran)."""
    means = mean_over_seeds(results)
    best = {}
    for (algorithm, E, C, alpha), (lr, beta) in best_settings(results).items():
        accuracy, seeds, spread = means[(algorithm, beta, E, C, alpha, lr)]
        best[(algorithm, E, C, alpha)] = (accuracy, lr, beta, seeds, spread)
    return best


def eta_eff_tables(results, fmt: str) -> list[Table]:
    """Per (E, C): rows eta_eff, columns alpha, cells FedAvg / FedAvgM (each beta > 0 its own row) at that
    eta_eff, where both ran."""
    means = mean_over_seeds(results)
    by_eta = {}
    for (algorithm, beta, E, C, alpha, lr), value in means.items():
        by_eta.setdefault((E, C, float(f"{lr / (1 - beta):.6g}"), alpha), {})[(algorithm, beta)] = value
    tables = []
    for E, C in sorted({(k[0], k[1]) for k in by_eta}, key=lambda k: (k[0], -k[1])):
        alphas = sorted({k[3] for k in by_eta if k[:2] == (E, C)}, reverse=True)
        rows = []
        for eta in sorted({k[2] for k in by_eta if k[:2] == (E, C)}):
            runs = {key for a in alphas for key in by_eta.get((E, C, eta, a), {})}
            plain = sorted(k for k in runs if k[1] == 0)
            for momentum in sorted(k for k in runs if k[1] > 0):
                if not plain:
                    continue
                row = [f"η_eff={eta:g} (β={momentum[1]:g})"]
                for a in alphas:
                    cellset = by_eta.get((E, C, eta, a), {})
                    row.append(" / ".join(cell(*cellset.get(k, (float("nan"), 0, 0.0))) for k in (plain[0], momentum)))
                rows.append(row)
        if rows:
            tables.append(Table(["η_eff"] + [f"α={a:g}" for a in alphas], rows, footnotes=[
                f"E = {E}, C = {C:g}: FedAvg at client lr η_eff / FedAvgM at client lr η_eff (1 - β), final test "
                "accuracy, mean ± half the range over seeds."], title=f"Equal effective learning rate, E = {E}, "
                                                                      f"C = {C:g}"))
    return tables


def _mean_seeds_spread(best_cell) -> tuple[float, int, float]:
    return (float("nan"), 0, 0.0) if best_cell is None else (best_cell[0], best_cell[3], best_cell[4])


def hsu_tables(results, fmt: str) -> list[Table]:
    best = best_cells(results)
    algorithms = [a for a in RULES if any(k[0] == a for k in best)]
    tables = []
    for E in sorted({k[1] for k in best}):
        fractions = sorted({k[2] for k in best if k[1] == E}, reverse=True)
        alphas = sorted({k[3] for k in best if k[1] == E}, reverse=True)
        if fmt == "csv":
            header = ["C"] + [f"alpha={a:g} {label(alg)}" for a in alphas for alg in algorithms]
        else:
            header = ["C"] + [f"α={a:g}" for a in alphas]
        rows = []
        for C in fractions:
            cells = [[_mean_seeds_spread(best.get((alg, E, C, a))) for alg in algorithms] for a in alphas]
            if fmt == "csv":
                rows.append([C] + [v[0] for pair in cells for v in pair])
            else:
                rows.append([f"C={C:g}"] + [" / ".join(cell(*v) for v in pair) for pair in cells])
        seeds = sorted({v[3] for k, v in best.items() if k[1] == E})
        chosen = "; ".join(f"{label(alg)} C={C:g} α={a:g}: lr {best[(alg, E, C, a)][1]:g}"
                           + (f", β {best[(alg, E, C, a)][2]:g}" if best[(alg, E, C, a)][2] else "")
                           for alg in algorithms for C in fractions for a in alphas if (alg, E, C, a) in best)
        notes = [f"Final test accuracy of the global model, best setting per cell averaged over "
                 f"{'/'.join(map(str, seeds))} population seed(s) (± half the range over the seeds); cells: "
                 f"{' / '.join(label(a) for a in algorithms)}.",
                 f"Chosen: {chosen}."]
        tables.append(Table(header, rows, digits=3, footnotes=notes, title=f"({'ab'[min(len(tables), 1)]}) Local "
                                                                             f"epochs E = {E}"))
    return tables


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m fedmpi.analysis.hsu_table", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", help="an hsu sweep folder (its index.json)")
    add_table_args(parser)
    args = parser.parse_args(argv)
    results = load_results(args.sweep)
    tables = hsu_tables(results, args.format) + (eta_eff_tables(results, args.format) if args.format != "csv" else [])
    emit("\n".join(render(t, args.format) for t in tables), args.out)


if __name__ == "__main__":
    raise SystemExit(cli(main))
