"""`python -m fedmpi.analysis.hsu_table SWEEP [--format text|md|csv] [--out FILE]`: Hsu et al.'s Table 1 from an hsu sweep.

Rows: reporting fraction C (largest first), columns: alpha (largest first), one panel per local epochs E. Each
cell is the final test accuracy of the best setting, averaged over the population seeds: FedAvg's best client
lr, and FedAvgM's best (client lr, beta), each chosen by its seed-mean. FedAvg and FedAvgM side by side as
"FedAvg / FedAvgM" (text, md) or as two columns per alpha (csv)."""
from __future__ import annotations

import argparse

from fedmpi.algorithms.registry import RULES, method_label
from fedmpi.analysis.hsu_results import load_results, mean_over_seeds
from fedmpi.analysis.run_log import cli
from fedmpi.analysis.tables import Table, add_table_args, emit, render



def label(algorithm: str) -> str:
    return method_label(algorithm)[0]


def best_cells(results) -> dict[tuple, tuple[float, float, float, int]]:
    """(algorithm, E, C, alpha) -> (best seed-mean accuracy, its lr, its beta, seeds)."""
    best = {}
    for (algorithm, beta, E, C, alpha, lr), (accuracy, seeds) in mean_over_seeds(results).items():
        key = (algorithm, E, C, alpha)
        if key not in best or accuracy > best[key][0]:
            best[key] = (accuracy, lr, beta, seeds)
    return best


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
            cells = [[best.get((alg, E, C, a), (float("nan"),))[0] for alg in algorithms] for a in alphas]
            if fmt == "csv":
                rows.append([C] + [v for cell in cells for v in cell])
            else:
                rows.append([f"C={C:g}"] + [" / ".join("-" if v != v else f"{v:.3f}" for v in cell)
                                            for cell in cells])
        seeds = sorted({s for k, (_, _, _, s) in best.items() if k[1] == E})
        chosen = "; ".join(f"{label(alg)} C={C:g} α={a:g}: lr {best[(alg, E, C, a)][1]:g}"
                           + (f", β {best[(alg, E, C, a)][2]:g}" if best[(alg, E, C, a)][2] else "")
                           for alg in algorithms for C in fractions for a in alphas if (alg, E, C, a) in best)
        notes = [f"Final test accuracy of the global model, best setting per cell averaged over "
                 f"{'/'.join(map(str, seeds))} population seed(s); cells: {' / '.join(label(a) for a in algorithms)}.",
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
    tables = hsu_tables(load_results(args.sweep), args.format)
    emit("\n".join(render(t, args.format) for t in tables), args.out)


if __name__ == "__main__":
    raise SystemExit(cli(main))
