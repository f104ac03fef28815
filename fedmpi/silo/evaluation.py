"""Held-out evaluation of the global model Θ on every validation set, when asked for (eval.every = N > 0):
after round 1, every N rounds, and after the last round; eval.every = 0 evaluates nothing. Each evaluated fold's threshold comes from the other 9 folds (the FV folds
included); the validators compute the metrics, the server logs them to /eval and prints them, and at the end
prints a table of the final model's accuracy next to the first round's. A diverged model (embeddings not finite)
is logged with NaN metrics and said so in its evaluation line; the run goes on. The large-scale benchmarks
(`eval.sets`, fedmpi.evaluation.benchmarks) are evaluated on the server at the same rounds and logged in the same
row under their own metric names."""
from __future__ import annotations

import sys

import torch

from fedmpi.core.schedule import evaluation_due
from fedmpi.evaluation.held_out import accuracy_line, accuracy_table, log_row, logged_first


class Evaluation:
    """Schedules evaluations of Θ and runs them on the validator pool as side work of the server."""

    def __init__(self, cfg, pool, log, stream=sys.stdout, benchmarks=None):
        self.cfg, self.pool, self.log, self.stream = cfg, pool, log, stream
        self.benchmarks = benchmarks                         # fedmpi.evaluation.benchmarks.Benchmarks or None
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
