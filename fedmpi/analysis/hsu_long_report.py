"""The results file of the focused alpha = 0 stage of Hsu et al.'s study (jobs/hsu_long.py, `make hsu-cpu-long`),
from the HDF5 logs of its sweep folder: (1) the tuning seed at each re-checked eta_eff, (2) each rule at its chosen
eta_eff round by round, mean ± half range over the population seeds, with the figure of test accuracy against
rounds, (3) FedAvgM - FedAvg paired seed by seed round by round, and (4) the verdict per claim: FedAvgM keeps more
than FedAvg at alpha = 0 where the final paired difference is at least MARGIN and every seed's above 0."""
from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from fedmpi.analysis.hsu_report import Cells, rule_name, spread, start_report
from fedmpi.analysis.hsu_results import load_results
from fedmpi.analysis.plots import figure_legend, panel_grid, save_figure
from fedmpi.analysis.tables import Table, render
from fedmpi.store.h5log import LogReader

MARGIN = 0.05     # the goal for the paired difference at alpha = 0 (the paper's is 0.468)
CHANCE = 0.1


def curves(rows: list[dict]) -> dict[tuple, dict[int, tuple[np.ndarray, np.ndarray]]]:
    """(algorithm, beta, alpha, lr) -> seed -> (rounds completed at each evaluation, test accuracy there), from the
    sweep index's rows of completed runs."""
    out = defaultdict(dict)
    for row in rows:
        labels = row["labels"]
        with LogReader(row["log"]) as reader:
            ev = reader.table("eval")
        out[(labels["algorithm"], labels["beta"], labels["alpha"], labels["lr"])][labels["seed"]] = (
            np.asarray(ev["round"], dtype=int) + 1, np.asarray(ev["test/accuracy"], dtype=float))
    return out


def checkpoints(rounds: np.ndarray, count: int = 5) -> list[int]:
    """About `count` evaluation rounds spread over the run, its last included."""
    picks = np.unique(np.linspace(0, len(rounds) - 1, count).round().astype(int))
    return [int(rounds[i]) for i in picks]


def at(curve: tuple[np.ndarray, np.ndarray], r: int) -> float:
    rounds, accuracy = curve
    return float(accuracy[list(rounds).index(r)])


def tuning_table(cells: Cells, runs: dict, seed: int) -> Table:
    rows = []
    for (algorithm, beta, alpha, lr), seeds in sorted(runs.items(), key=lambda kv: (kv[0][1], -kv[0][2], kv[0][3])):
        if seed not in seeds:
            continue
        rounds, accuracy = seeds[seed]
        eta = lr / (1 - beta)
        chosen = any(key[:2] == (algorithm, beta) and key[-1] == alpha and value[0] == lr
                     for key, value in cells.chosen.items())
        rows.append([rule_name(algorithm, beta), f"{alpha:g}", f"{eta:g}" + (" (chosen)" if chosen else ""),
                     f"{accuracy[-1]:.3f}", f"{accuracy.max():.3f} (round {rounds[accuracy.argmax()]})"])
    return Table(["rule", "α", "η_eff", "final accuracy", "best over the run"], rows, footnotes=[
        f"The tuning seed ({seed}): each eta_eff the stage ran there; 'chosen' is the one of the highest final "
        "accuracy, which the other seeds ran."])


def chosen_curves(cells: Cells, runs: dict) -> dict[tuple, dict[int, tuple]]:
    """(algorithm, beta, alpha) -> seed -> curve, at each rule's chosen eta_eff."""
    return {(a, b, alpha): runs[(a, b, alpha, lr)] for (a, b, _, C, alpha), (lr, _) in cells.chosen.items()
            if (a, b, alpha, lr) in runs}


def rounds_table(chosen: dict, marks: list[int]) -> Table:
    rows = []
    for (algorithm, beta, alpha), seeds in sorted(chosen.items(), key=lambda kv: (-kv[0][2], kv[0][1])):
        rows.append([f"{alpha:g}", rule_name(algorithm, beta)] + [spread([at(c, r) for c in seeds.values()])
                                                                   for r in marks])
    return Table(["α", "rule"] + [f"round {r}" for r in marks], rows, footnotes=[
        "Test accuracy at the chosen η_eff, mean ± half the range over the population seeds."])


def paired(chosen: dict, alpha: float, r: int) -> list[float]:
    """FedAvgM - FedAvg at round r, seed by seed (the seeds both ran)."""
    rules = sorted((k for k in chosen if k[2] == alpha), key=lambda k: k[1])
    if len(rules) < 2:
        return []
    base, other = chosen[rules[0]], chosen[rules[-1]]
    return [at(other[s], r) - at(base[s], r) for s in sorted(set(base) & set(other))]


def paired_table(chosen: dict, marks: list[int]) -> Table:
    rows = []
    for alpha in sorted({k[2] for k in chosen}, reverse=True):
        rows.append([f"{alpha:g}"] + [f"{spread(d)} [{min(d):+.3f}, {max(d):+.3f}]" if (d := paired(chosen, alpha, r))
                                      else "-" for r in marks])
    return Table(["α"] + [f"round {r}" for r in marks], rows, footnotes=[
        "FedAvgM β − FedAvg, seed by seed (the same partition, client sampling and initial model), each at its own "
        "chosen η_eff: mean ± half range [lowest, highest]."])


def verdict(chosen: dict, rounds: list[int], alpha: float = 0.0) -> list[str]:
    """The claim's row: the final paired difference, its spread, the lowest seed, and the first evaluation where
    the paired mean reached MARGIN with every seed above 0."""
    d = paired(chosen, alpha, rounds[-1])
    if not d:
        return ["FedAvgM keeps more than FedAvg at α=0", "-", "not run"]
    shows = float(np.mean(d)) >= MARGIN and min(d) > 0
    first = next((r for r in rounds if (p := paired(chosen, alpha, r)) and np.mean(p) >= MARGIN and min(p) > 0), None)
    best = {rule_name(a, b): max(float(c[1].max()) for c in seeds.values()) for (a, b, al), seeds in chosen.items()
            if al == alpha}
    here = (f"round {rounds[-1]}: paired {spread(d)}, lowest seed {min(d):+.3f}, {len(d)} seeds; first round with "
            f"mean ≥ {MARGIN} and every seed > 0: {first if first else 'none'}; best accuracy of any seed: "
            + ", ".join(f"{k} {v:.3f}" for k, v in best.items()))
    return ["FedAvgM keeps more than FedAvg at α=0 (76.9 % against 30.1 % in the paper)", here,
            "shows" if shows else "does not show"]


def draw(chosen: dict, cells: Cells, path: Path) -> list:
    """Test accuracy against rounds, one panel per alpha: each rule's mean over the seeds, the band their range."""
    alphas = sorted({k[2] for k in chosen}, reverse=True)
    fig, axes = panel_grid(len(alphas), max_cols=len(alphas), size=(4.6, 3.6))
    fig.set_layout_engine("constrained")
    for ax, alpha in zip(axes, alphas):
        for (algorithm, beta, al), seeds in sorted(chosen.items(), key=lambda kv: kv[0][1]):
            if al != alpha:
                continue
            rounds = next(iter(seeds.values()))[0]
            ys = np.array([c[1] for c in seeds.values()])
            eta = cells.eta[(algorithm, beta, cells.fractions[0], alpha)]
            line, = ax.plot(rounds, ys.mean(0), label=f"{rule_name(algorithm, beta)} (η_eff {eta:g})")
            ax.fill_between(rounds, ys.min(0), ys.max(0), color=line.get_color(), alpha=0.2, linewidth=0)
        ax.axhline(CHANCE, color="grey", linestyle=":", linewidth=1)
        ax.set_ylim(0, 1)
        ax.set_title(f"C={cells.fractions[0]:g}  α={alpha:g}", fontsize=9)
        ax.set_xlabel("round")
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3)
    figure_legend(fig, axes, "mean over the seeds; band: lowest to highest seed; dotted: chance")
    return save_figure(fig, path)


def write_report(folder: Path, out: Path, rationale: str = "", written_by: str = "") -> Path:
    report = start_report(folder, out, "Hsu et al. (2019), the α = 0 claim at length, at {scale} scale", rationale,
                          written_by)
    started, names = time.monotonic(), list(report.rows)
    cells = Cells(load_results(folder))
    runs = curves([report.rows[n] for n in sorted(report.done)])
    tuning = min(s for seeds in runs.values() for s in seeds)
    chosen = chosen_curves(cells, runs)
    rounds = [int(r) for r in next(iter(next(iter(chosen.values())).values()))[0]]
    marks = checkpoints(np.array(rounds))
    report.section("The tuning seed at length", names, started, [render(tuning_table(cells, runs, tuning), "md")],
                   "fedmpi.analysis.hsu_long_report.tuning_table over the /eval tables")
    started = time.monotonic()
    draw(chosen, cells, report.figure("rounds"))
    report.section("Test accuracy against rounds", names, started,
                   [report.png(report.figure("rounds"), "test accuracy against rounds"), "",
                    render(rounds_table(chosen, marks), "md"), "", render(paired_table(chosen, marks), "md")],
                   "hsu_long_report.draw, rounds_table and paired_table over the chosen η_eff's runs")
    started = time.monotonic()
    report.section("The paper's claim, checked against these numbers", [], started,
                   [render(Table(["claim", "here", "verdict"], [verdict(chosen, rounds)]), "md")],
                   "fedmpi.analysis.hsu_long_report.verdict over the tables above")
    return report.write()
