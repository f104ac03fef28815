"""The runs of an hsu sweep (python -m jobs.sweep hsu) with their grid values and final test accuracy: the
sweep's index.json gives each run's labels and log; the log's last /eval row (after the last round) gives the
accuracy. Runs without a finished log are counted and left out."""
from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedmpi.store.h5log import LogReader, LogSchemaError
from fedmpi.analysis.sweep_index import read_index
from fedmpi.analysis.run_log import AnalysisError

KEYS = ("algorithm", "beta", "epochs", "fraction", "alpha", "lr", "seed")


@dataclass(frozen=True)
class Result:
    algorithm: str
    beta: float
    epochs: int
    fraction: float
    alpha: float
    lr: float
    seed: int
    accuracy: float

    @property
    def eta_eff(self) -> float:
        """Hsu et al.'s effective learning rate eta / (1 - beta)."""
        return self.lr / (1.0 - self.beta)


def final_accuracy(log: Path, rounds: int | None = None) -> float | None:
    try:
        with LogReader(log) as reader:
            ev = reader.table("eval")
            done = reader.table("rounds").get("round", np.zeros(0))
            if not len(ev.get("round", ())) or (rounds is not None and len(done) < rounds):
                return None
            return float(ev["test/accuracy"][-1])
    except (LogSchemaError, OSError, KeyError):
        return None


def load_results(sweep: str | Path) -> list[Result]:
    folder = Path(sweep)
    try:
        index = read_index(folder)
    except ValueError as exc:
        raise AnalysisError(str(exc)) from None
    rows = [r for r in index["runs"] if set(KEYS) <= set(r.get("labels", {}))]
    if not rows:
        raise AnalysisError(f"{folder}: no run of an hsu sweep in its index")
    results, missing = [], 0
    for row in rows:
        accuracy = final_accuracy(Path(row["log"]))
        if accuracy is None:
            missing += 1
            continue
        labels = row["labels"]
        results.append(Result(**{k: labels[k] for k in KEYS}, accuracy=accuracy))
    if missing:
        print(f"note: {missing} of {len(rows)} runs have no final evaluation yet and are left out", file=sys.stderr)
    if not results:
        raise AnalysisError(f"{folder}: none of its {len(rows)} runs has a final evaluation")
    return results


def mean_over_seeds(results: list[Result]) -> dict[tuple, tuple[float, int, float]]:
    """(algorithm, beta, epochs, fraction, alpha, lr) -> (mean accuracy over seeds, number of seeds, seed spread:
    half the range between the lowest and the highest seed's accuracy)."""
    groups = defaultdict(list)
    for r in results:
        groups[(r.algorithm, r.beta, r.epochs, r.fraction, r.alpha, r.lr)].append(r.accuracy)
    return {key: (float(np.mean(values)), len(values), float(np.ptp(values)) / 2) for key, values in groups.items()}


def best_settings(results: list[Result], per_beta: bool = False) -> dict[tuple, tuple[float, float]]:
    """(algorithm, [beta,] epochs, fraction, alpha) -> the (client lr, beta) of the highest final accuracy averaged
    over the seeds that every setting of the cell ran (the tuning seed, where only the best setting ran more
    seeds: jobs/hsu_study.py); ties go to the smaller eta_eff. per_beta: each server momentum its own cell."""
    runs = defaultdict(lambda: defaultdict(dict))
    for r in results:
        cell_key = (r.algorithm, r.beta, r.epochs, r.fraction, r.alpha) if per_beta else \
            (r.algorithm, r.epochs, r.fraction, r.alpha)
        runs[cell_key][(r.lr, r.beta)][r.seed] = r.accuracy
    best = {}
    for cell_key, settings in runs.items():
        common = set.intersection(*(set(seeds) for seeds in settings.values()))
        score = {s: float(np.mean([seeds[k] for k in common])) for s, seeds in settings.items()}
        best[cell_key] = max(score, key=lambda s: (score[s], -s[0] / (1 - s[1])))
    return best


def cell(mean: float, seeds: int, spread: float) -> str:
    """'0.750 ±0.050' (the seed spread, with two or more seeds), '0.750' (one seed), '-' (no run)."""
    if mean != mean:
        return "-"
    return f"{mean:.3f}" + (f" ±{spread:.3f}" if seeds > 1 else "")
