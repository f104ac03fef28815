"""Held-out evaluation of the global model Θ on every validation set, when asked for (eval.every = N > 0):
after round 1, every N rounds, and after the last round; eval.every = 0 evaluates nothing. Each evaluated fold's threshold comes from the other 9 folds (the FV folds
included); the validators compute the metrics, the server logs them to /eval and prints them, and at the end
prints a table of the final model's accuracy next to the first round's. A diverged model (embeddings not finite)
is logged with NaN metrics and said so in its evaluation line; the run goes on. The large-scale benchmarks
(`eval.sets`, fedmpi.silo.benchmarks) are evaluated on the server at the same rounds and logged in the same
row under their own metric names."""
from __future__ import annotations

import sys

import torch

from fedmpi.core.schedule import evaluation_due
from fedmpi.metrics.evaluator import diverged
from fedmpi.silo.benchmarks import headline_line
from fedmpi.store.h5log import EVAL_METRICS

# Evaluator's metric names -> the run log's column names
LOG_METRIC = {"accuracy": "accuracy", "accuracy_std": "accuracy_std", "tar@far=0.001": "tar_far_1e-3",
              "tar@far=0.01": "tar_far_1e-2"}
assert set(LOG_METRIC.values()) == set(EVAL_METRICS)


def log_row(r: int, step: int, results: dict[str, dict[str, float]],
            benchmarks: dict[str, dict[str, float]] | None = None) -> dict:
    row = {"round": r, "step": step}
    for name, metrics in results.items():
        for key, column in LOG_METRIC.items():
            row[f"{name}/{column}"] = metrics[key]
    for name, metrics in (benchmarks or {}).items():
        row.update({f"{name}/{metric}": value for metric, value in metrics.items()})
    return row


def accuracy_line(r: int, results: dict, benchmarks: dict | None = None) -> str:
    parts = "  ".join(f"{name} {100 * m['accuracy']:.2f}" for name, m in results.items())
    extra = f"; {headline_line(benchmarks)}" if benchmarks else ""
    lost = [name for name, m in results.items() if diverged(m)]
    if lost:
        extra += f"; diverged: the global model's embeddings are not finite on {', '.join(lost)} (NaN logged)"
    return f"eval after round {r + 1}: held-out accuracy % {parts}{extra}"


def accuracy_table(first: tuple[int, dict], last: tuple[int, dict]) -> str:
    """Held-out accuracy (mean ± std over the held-out folds, %) per set: first evaluation next to the last."""
    (r0, a), (r1, b) = first, last
    width = max(len("mean"), *(len(n) for n in a))
    lines = ["held-out accuracy of the global model (%)",
             f"  {'set':<{width}}  {f'round {r0 + 1}':>15}  {f'round {r1 + 1}':>15}  {'change':>7}"]

    def cell(m):
        return f"{100 * m['accuracy']:6.2f} ± {100 * m['accuracy_std']:5.2f}"

    for name in a:
        change = 100 * (b[name]["accuracy"] - a[name]["accuracy"])
        lines.append(f"  {name:<{width}}  {cell(a[name]):>15}  {cell(b[name]):>15}  {change:+7.2f}")
    mean_a = sum(m["accuracy"] for m in a.values()) / len(a)
    mean_b = sum(m["accuracy"] for m in b.values()) / len(b)
    lines.append(f"  {'mean':<{width}}  {100 * mean_a:15.2f}  {100 * mean_b:15.2f}  {100 * (mean_b - mean_a):+7.2f}")
    return "\n".join(lines)


def logged_first(log) -> tuple[int, dict] | None:
    """(round, {set: accuracy and std}) of the first evaluation already in the log (a resumed run's), or None."""
    table = getattr(log, "f", None) and log.f.get("eval")
    if table is None or "round" not in table or not table["round"].shape[0]:
        return None
    sets = [name for name in table if "accuracy" in getattr(table[name], "keys", dict)()]
    return int(table["round"][0]), {s: {"accuracy": float(table[f"{s}/accuracy"][0]),
                                        "accuracy_std": float(table[f"{s}/accuracy_std"][0])} for s in sets}


class Evaluation:
    """Schedules evaluations of Θ and runs them on the validator pool as side work of the server."""

    def __init__(self, cfg, pool, log, stream=sys.stdout, benchmarks=None):
        self.cfg, self.pool, self.log, self.stream = cfg, pool, log, stream
        self.benchmarks = benchmarks                         # fedmpi.silo.benchmarks.Benchmarks or None
        self.waiting: list[tuple[int, torch.Tensor]] = []   # (round, Θ) not yet sent to the validators
        self.in_flight: tuple[int, object, torch.Tensor] | None = None  # (round, Request, Θ)
        self.first: tuple[int, dict] | None = logged_first(log)   # a resumed run's, from its log
        self.last: tuple[int, dict] | None = None

    @property
    def busy(self) -> bool:
        return bool(self.waiting) or self.in_flight is not None

    def schedule(self, r: int, theta: torch.Tensor) -> None:
        """Θ after round r: evaluated later (from a copy) when an evaluation is due at round r."""
        if evaluation_due(r, self.cfg.eval.every, self.cfg.rounds):
            self.waiting.append((r, theta.clone()))

    def step(self) -> None:
        """Log a finished evaluation; send the next one out. Replies are advanced by the pool's progress()."""
        if self.in_flight is not None and self.in_flight[1].done:
            r, request, theta = self.in_flight
            self.in_flight = None
            benchmarks = self.benchmarks.evaluate(theta) if self.benchmarks else None
            self._record(r, request.result(), benchmarks)
        if self.in_flight is None and self.waiting:
            r, theta = self.waiting.pop(0)
            self.in_flight = (r, self.pool.post("evaluate", theta), theta)

    def run_pending(self) -> None:
        """Finish every scheduled evaluation now."""
        while self.busy:
            self.step()
            if self.in_flight is not None:
                self.pool.wait([self.in_flight[1]])

    def _record(self, r: int, results: dict, benchmarks: dict | None = None) -> None:
        self.log.append("eval", **log_row(r, (r + 1) * self.cfg.fed.K, results, benchmarks))
        self.first = self.first or (r, results)
        self.last = (r, results)
        self.stream.write(accuracy_line(r, results, benchmarks) + "\n")
        self.stream.flush()

    def summary(self) -> str:
        return accuracy_table(self.first, self.last) if self.first else ""
