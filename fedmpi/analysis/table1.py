"""The paper's Table 1: final training loss per party, exponentially smoothed, for solo / centralized /
FedAvg / PFM runs (rows: party, columns: method; one block of rows per setting).

Smoothing (the paper: 'exponential smoothed with a factor of 0.99'): over the rounds' per-party mean loss,
s_0 = x_0 and s_t = f * s_(t-1) + (1 - f) * x_t with f = 0.99 (--factor); the table shows s at the last
logged round. A solo run fills the cell of the party it trained (fed.solo_party). A centralized run logs one
loss over the union of all parties' data: it is shown in a row of its own (union†). A cell with several runs
(repeats of one method in one setting) shows their mean, and a footnote says so.
"""
from __future__ import annotations

import argparse
from collections import defaultdict

from fedmpi.analysis.find_runs import collect_runs, runs_by_setting
from fedmpi.analysis.methods import TABLE1_METHODS, fedface_label, method_label, method_order, method_sort_key
from fedmpi.analysis.run_log import AnalysisError, CENTRALIZED_PARTY, Run, UNION_FOOTNOTE, add_run_args, cli, party_row_name
from fedmpi.analysis.tables import Table, add_table_args, ema_final, emit, nan_mean, render

DEFAULT_FACTOR = 0.99
DEFAULT_METHODS = (method_label("solo")[0], *(fedface_label(key) for key in TABLE1_METHODS))


def cell_runs(runs: list[Run]) -> dict[tuple[str, str, str], list[tuple[Run, str]]]:
    """(setting, party, method) -> [(run, party column in its log)]; settings as runs_by_setting makes them
    (the paper's Table 1 has one block per model, all 3-party with K = 100)."""
    cells = defaultdict(list)
    for setting, members in runs_by_setting(runs).items():
        for run in members:
            parties = [run.solo_party] if run.setting == "solo" else run.parties
            for party in parties:
                cells[(setting, party, run.method)].append((run, party))
    return cells


def table1(runs: list[Run], factor: float = DEFAULT_FACTOR, methods=DEFAULT_METHODS) -> Table:
    runs = [r for r in runs if methods is None or r.method in methods]
    if not runs:
        raise AnalysisError(f"no run of the methods {', '.join(methods)} among the runs given "
                            "(--methods all to take every method)")
    cells = cell_runs(runs)
    columns = sorted({method for _, _, method in cells}, key=method_sort_key)
    groups = list(dict.fromkeys(group for group, _, _ in cells))
    rows, averaged = [], []
    for group in groups:
        parties = list(dict.fromkeys(p for g, p, _ in cells if g == group))
        parties.sort(key=lambda p: p == CENTRALIZED_PARTY)   # the union row last
        for party in parties:
            row = [group, party_row_name(party)]
            for method in columns:
                members = cells.get((group, party, method), [])
                value = nan_mean([ema_final(run.loss(col), factor) for run, col in members])
                if len(members) > 1:
                    averaged.append(f"{group} / {party_row_name(party)} / {method}: mean of {len(members)} runs")
                row.append(value)
            rows.append(row)
    footnotes = [f"Final training loss, EMA over rounds with factor {factor:g}: s_0 = x_0, "
                 f"s_t = {factor:g} s_(t-1) + {1 - factor:.2g} x_t of the per-party mean loss x_t, at the last "
                 "logged round."]
    if any(party == CENTRALIZED_PARTY for _, party, _ in cells):
        footnotes.append(UNION_FOOTNOTE)
    if averaged:
        footnotes.append("Cells averaged over repeated runs: " + "; ".join(averaged) + ".")
    return Table(header=["Setting", "Party", *columns],
                 rows=rows, digits=2, footnotes=footnotes)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m fedmpi.analysis.table1", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(parser)
    add_table_args(parser)
    parser.add_argument("--factor", type=float, default=DEFAULT_FACTOR,
                        help=f"EMA factor (default {DEFAULT_FACTOR}, the paper's)")
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                        help="comma-separated columns, by method name (" + ", ".join(method_order())
                             + ", with +FV for FV runs), or 'all' (default: the paper's "
                             + ",".join(DEFAULT_METHODS) + ")")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if not 0 <= args.factor < 1:
        raise ValueError(f"--factor: must be in [0, 1), got {args.factor}")
    methods = None if args.methods == "all" else [m.strip() for m in args.methods.split(",") if m.strip()]
    runs = collect_runs(args.runs, args.setting)
    emit(render(table1(runs, args.factor, methods), args.format), args.out)


if __name__ == "__main__":
    raise SystemExit(cli(main))
