"""What the server reports of DP-FedAvg (fed.dp): after every round ε at δ (fedmpi/aggregation/accounting.py),
the clipping norm, the noise's standard deviation and, with adaptive clipping, the noisy fraction of unclipped
updates; as the log's `privacy` table, on the progress line and in the summary. A run whose target ε would be
passed by its next round was planned shorter by the config (Config.rounds), on every rank alike."""
from __future__ import annotations

from fedmpi.aggregation.accounting import epsilon

COLUMNS = {"round": ((), "i8"), "epsilon": ((), "f8"), "clip": ((), "f8"), "noise_std": ((), "f8"),
           "unclipped": ((), "f8")}


class PrivacyReport:
    """`dp`: the fed.dp section; `planned`, `rounds`: the rounds planned and those within the target ε; `q`: the
    accountant's sampling rate; `mechanism`: the server's Gaussian mechanism (its clip and noise of the round)."""

    def __init__(self, dp, planned: int, rounds: int, q: float, mechanism):
        self.dp, self.mechanism = dp, mechanism
        self.planned, self.rounds, self.q = planned, rounds, q
        self.epsilon = 0.0

    def row(self, r: int) -> dict:
        self.epsilon = epsilon(r + 1, self.dp.noise_multiplier, self.dp.delta, self.q)
        return {"round": r, "epsilon": self.epsilon, **self.mechanism.last}

    def note(self) -> str:
        return f"eps {self.epsilon:.3g}"

    def summary(self) -> str:
        line = (f"  privacy: epsilon {self.epsilon:.4g} at delta {self.dp.delta:g} "
                f"(noise multiplier {self.dp.noise_multiplier:g}, clip {self.mechanism.clip:.4g}"
                f"{f', sampling rate {self.q:.4g}' if self.q < 1 else ''}"
                f"{', adaptive' if self.dp.adaptive else ''})")
        if self.rounds < self.planned:
            line += (f"\n  stopped after {self.rounds} of {self.planned} planned rounds: one more would pass "
                     f"fed.dp.target_epsilon {self.dp.target_epsilon:g}")
        return line + "\n"
