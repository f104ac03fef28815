"""The results file of Hsu et al.'s study (jobs/hsu_study.py, `python -m jobs.reproduce hsu`, `make hsu-cpu`): from
the HDF5 logs of the study's sweep folder, (1) Table 1's cells for FedAvg and each FedAvgM beta at the eta_eff
chosen on the tuning seed, mean ± half range over the population seeds; (2) the paired differences seed by seed
(FedAvgM - FedAvg in a cell; alpha = 100 - alpha = 0 for a rule at a C); (3) the usable eta_eff window of every
rule, C and alpha on the tuning seed, with the Fig. 5 figure (hsu_lr.draw); (4) the paper's claims checked
against these numbers, each with its verdict."""
from __future__ import annotations

import math
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from fedmpi.analysis.fedface_report import Report
from fedmpi.analysis.fedface_study_table import header
from fedmpi.analysis.hsu_lr import draw
from fedmpi.analysis.hsu_results import Result, best_settings, load_results
from fedmpi.analysis.methods import method_label
from fedmpi.analysis.tables import Table, render

CHANCE = 0.1
USABLE = 0.8      # an eta_eff is usable where its accuracy is at least this share of the cell's best above chance


def rule_name(algorithm: str, beta: float) -> str:
    return method_label(algorithm)[0] + (f" β={beta:g}" if beta else "")


def spread(values: list[float]) -> str:
    """'mean ± half range [min, max]' over seeds (one value alone)."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{np.mean(values):.3f} ± {(max(values) - min(values)) / 2:.3f}"


class Cells:
    """Each (algorithm, beta, C, alpha) at its chosen eta_eff: {seed: accuracy}, and the eta_eff."""

    def __init__(self, results: list[Result]):
        self.results = results
        self.chosen = best_settings(results, per_beta=True)
        self.seeds: dict[tuple, dict[int, float]] = {}
        self.eta: dict[tuple, float] = {}
        for (algorithm, beta, E, C, alpha), (lr, _) in self.chosen.items():
            key = (algorithm, beta, C, alpha)
            self.seeds[key] = {r.seed: r.accuracy for r in results if (r.algorithm, r.beta, r.epochs, r.fraction,
                                                                       r.alpha, r.lr) == (algorithm, beta, E, C,
                                                                                          alpha, lr)}
            self.eta[key] = lr / (1 - beta)
        self.rules = sorted({(k[0], k[1]) for k in self.seeds}, key=lambda r: (r[1], r[0]))
        self.fractions = sorted({k[2] for k in self.seeds}, reverse=True)
        self.alphas = sorted({k[3] for k in self.seeds}, reverse=True)

    def paired(self, a: tuple, b: tuple) -> list[float]:
        """a - b seed by seed, over the seeds both ran."""
        sa, sb = self.seeds.get(a, {}), self.seeds.get(b, {})
        return [sa[s] - sb[s] for s in sorted(set(sa) & set(sb))]


def table1(cells: Cells) -> Table:
    rows = []
    for C in cells.fractions:
        for rule in cells.rules:
            row = [f"C={C:g}", rule_name(*rule)]
            for alpha in cells.alphas:
                key = (*rule, C, alpha)
                seeds = cells.seeds.get(key, {})
                row.append(f"{spread(list(seeds.values()))} (η_eff {cells.eta[key]:g}, {len(seeds)} seeds)"
                           if seeds else "-")
            rows.append(row)
    return Table(["C", "rule"] + [f"α={a:g}" for a in cells.alphas], rows, footnotes=[
        "Final test accuracy at the η_eff chosen on the tuning seed, mean ± half the range over "
        "the population seeds."])


def paired_table(cells: Cells) -> Table:
    rows = []
    fedavg = next((r for r in cells.rules if r[1] == 0), None)
    for C in cells.fractions:
        for rule in cells.rules:
            if rule == fedavg or fedavg is None:
                continue
            row = [f"C={C:g}", f"{rule_name(*rule)} − FedAvg"]
            for alpha in cells.alphas:
                d = cells.paired((*rule, C, alpha), (*fedavg, C, alpha))
                row.append(f"{spread(d)} [{min(d):+.3f}, {max(d):+.3f}]" if d else "-")
            rows.append(row)
    return Table(["C", "difference"] + [f"α={a:g}" for a in cells.alphas], rows, footnotes=[
        "Seed by seed (the same partition, client sampling and initial model), each rule at its own chosen η_eff: "
        "mean ± half range of the differences [lowest, highest]."])


def alpha_drop_table(cells: Cells) -> Table:
    hi, lo = cells.alphas[0], cells.alphas[-1]
    rows = []
    for C in cells.fractions:
        for rule in cells.rules:
            d = cells.paired((*rule, C, hi), (*rule, C, lo))
            rows.append([f"C={C:g}", rule_name(*rule), f"{spread(d)} [{min(d):+.3f}, {max(d):+.3f}]" if d else "-"])
    return Table(["C", "rule", f"accuracy at α={hi:g} − at α={lo:g}"], rows, footnotes=[
        "Seed by seed (a seed's partition differs with α; its sampling and initial model do not)."])


def windows(results: list[Result], seed: int) -> dict[tuple, tuple[list[float], float]]:
    """(algorithm, beta, C, alpha) -> (the usable eta_eff on `seed`, the best accuracy there)."""
    by = defaultdict(dict)
    for r in results:
        if r.seed == seed:
            by[(r.algorithm, r.beta, r.fraction, r.alpha)][r.eta_eff] = r.accuracy
    out = {}
    for key, points in by.items():
        best = max(points.values())
        usable = sorted(e for e, a in points.items() if best > CHANCE + 0.05 and a - CHANCE >= USABLE * (best - CHANCE))
        out[key] = (usable, best)
    return out


def decades(usable: list[float]) -> float:
    return math.log10(max(usable) / min(usable)) if usable else float("nan")


def window_table(cells: Cells, win: dict) -> Table:
    rows = []
    for C in cells.fractions:
        for rule in cells.rules:
            row = [f"C={C:g}", rule_name(*rule)]
            for alpha in cells.alphas:
                usable, best = win.get((*rule, C, alpha), ([], float("nan")))
                row.append(f"{', '.join(f'{e:g}' for e in usable)} ({decades(usable):.2f} decades; best {best:.3f})"
                           if usable else f"none (best {best:.3f})")
            rows.append(row)
    grid = sorted({float(f"{r.eta_eff:.6g}") for r in cells.results})
    return Table(["C", "rule"] + [f"α={a:g}" for a in cells.alphas], rows, footnotes=[
        f"Usable η_eff on the tuning seed: accuracy at least {USABLE:.0%} of the cell's best above chance (0.1); "
        f"the grid: {', '.join(f'{e:g}' for e in grid)} ({decades(grid):.2f} decades). 'none': the best is within "
        "0.05 of chance."])


def claims(cells: Cells, win: dict) -> Table:
    rows = []
    fedavg = next((r for r in cells.rules if r[1] == 0), None)
    hi, lo = cells.alphas[0], cells.alphas[-1]
    mean = lambda key: float(np.mean(list(cells.seeds[key].values()))) if cells.seeds.get(key) else float("nan")  # noqa: E731
    if fedavg:
        drops = {C: cells.paired((*fedavg, C, hi), (*fedavg, C, lo)) for C in cells.fractions}
        shown = all(d and min(d) > 0 for d in drops.values())
        rows.append(["FedAvg's accuracy falls as α → 0 (Table 1)",
                     "; ".join(f"C={C:g}: " + " → ".join(f"{mean((*fedavg, C, a)):.3f}" for a in cells.alphas)
                               + f", α={hi:g} − α={lo:g} {spread(d)} (every seed > 0: {bool(d) and min(d) > 0})"
                               for C, d in drops.items()),
                     "shows" if shown else "does not show in every seed"])
        if len(cells.fractions) > 1:
            big, small = cells.fractions[0], cells.fractions[-1]
            lows = [(a, mean((*fedavg, small, a)) - mean((*fedavg, big, a))) for a in cells.alphas]
            rows.append([f"...more with small C (C={small:g} below C={big:g} at small α)",
                         "; ".join(f"α={a:g}: {d:+.3f}" for a, d in lows),
                         "shows" if all(d < 0 for a, d in lows if a < hi) else "does not show"])
        for rule in cells.rules:
            if rule == fedavg:
                continue
            gains = {C: cells.paired((*rule, C, lo), (*fedavg, C, lo)) for C in cells.fractions}
            shown = all(d and min(d) > 0 for d in gains.values())
            rows.append([f"{rule_name(*rule)} keeps more than FedAvg at α={lo:g} (76.9 % against 30.1 % in the paper)",
                         "; ".join(f"C={C:g}: {mean((*rule, C, lo)):.3f} against {mean((*fedavg, C, lo)):.3f}, "
                                   f"paired {spread(d)}" for C, d in gains.items()),
                         "shows in every seed" if shown else "does not show in every seed"])
    if len(cells.fractions) > 1:
        big, small = cells.fractions[0], cells.fractions[-1]
        pairs = []
        for rule in cells.rules:
            for alpha in cells.alphas:
                w_big, w_small = (decades(win.get((*rule, C, alpha), ([], 0))[0]) for C in (big, small))
                if not (math.isnan(w_big) or math.isnan(w_small)):
                    pairs.append((rule, alpha, w_big, w_small))
        narrower = sum(ws < wb for _, _, wb, ws in pairs)
        wider = sum(ws > wb for _, _, wb, ws in pairs)
        rows.append([f"The usable η_eff window narrows as C shrinks (C={big:g} → {small:g})",
                     "; ".join(f"{rule_name(*r)} α={a:g}: {wb:.2f} → {ws:.2f} decades" for r, a, wb, ws in pairs),
                     f"narrower in {narrower}, wider in {wider}, equal in {len(pairs) - narrower - wider} of "
                     f"{len(pairs)} (one seed, a grid of factors 2-2.5: a step of the grid is 0.3-0.4 decades)"])
    return Table(["claim", "here", "verdict"], rows)


def start_report(folder: Path, out: Path, title: str, rationale: str = "", written_by: str = "") -> Report:
    """A results file's report with the study's header under `title` ({scale}: the study's scale)."""
    report = Report(Path(folder), Path(out))
    report.lines += header(report, rationale)
    report.lines[0] = "# " + title.format(scale=report.index["study"]["scale"])
    if written_by:
        report.lines[4:4] = [f"This file was written again from the same logs by {written_by}.", ""]
    return report


def write_report(folder: Path, out: Path, rationale: str = "", written_by: str = "") -> Path:
    report = start_report(folder, out, "Hsu et al. (2019) at {scale} scale", rationale, written_by)
    results = load_results(folder)
    tuning = min(r.seed for r in results)
    cells = Cells(results)
    names = [n for n in report.rows]

    started = time.monotonic()
    report.section("Table 1: final test accuracy at each rule's best η_eff", names, started,
                   [render(table1(cells), "md")], "fedmpi.analysis.hsu_report.table1 over the /eval tables")
    started = time.monotonic()
    report.section("Paired differences, seed by seed", names, started,
                   [render(paired_table(cells), "md"), "", render(alpha_drop_table(cells), "md")],
                   "the same runs, seed by seed")
    started = time.monotonic()
    win = windows(results, tuning)
    draw(results, report.figure("lr"))
    report.section("Fig. 5: accuracy against η_eff, and the usable window", names, started,
                   [report.png(report.figure("lr"), "accuracy against eta_eff"), "", render(window_table(cells, win),
                                                                                            "md")],
                   "fedmpi.analysis.hsu_lr.draw and hsu_report.windows over the tuning seed's runs")
    started = time.monotonic()
    report.section("The paper's claims, checked against these numbers", [], started,
                   [render(claims(cells, win), "md")], "fedmpi.analysis.hsu_report.claims over the tables above")
    return report.write()
