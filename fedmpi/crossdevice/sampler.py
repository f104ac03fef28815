"""Which clients report in a round, and which trainer rank trains each of them."""
from __future__ import annotations

import numpy as np

from fedmpi.config.clients import clients_per_round


class ClientSampler:
    """Draws max(floor(C M), 1) distinct clients uniformly per round from one seeded generator (PCG64);
    `state_dict` holds the generator's state and the rounds drawn, so a resumed run draws what the
    uninterrupted one would have."""

    def __init__(self, population: int, fraction: float, seed: int):
        if population < 1 or not 0 < fraction <= 1:
            raise ValueError(f"client sampler: need population >= 1 and 0 < fraction <= 1, got {population}, "
                             f"{fraction}")
        self.population, self.fraction, self.seed = population, fraction, seed
        self.count = clients_per_round(population, fraction)
        self.rng = np.random.default_rng(seed)
        self.rounds_drawn = 0

    def sample(self) -> np.ndarray:
        """The next round's clients (sorted int64)."""
        self.rounds_drawn += 1
        return np.sort(self.rng.choice(self.population, size=self.count, replace=False))

    def state_dict(self) -> dict:
        return {"seed": self.seed, "population": self.population, "fraction": self.fraction,
                "rounds_drawn": self.rounds_drawn, "bit_generator": _plain(self.rng.bit_generator.state)}

    def load_state_dict(self, state: dict) -> None:
        for key in ("seed", "population", "fraction"):
            if state[key] != getattr(self, key):
                raise ValueError(f"client sampler: the checkpoint has {key} {state[key]}, "
                                 f"this run {getattr(self, key)}")
        self.rng.bit_generator.state = state["bit_generator"]
        self.rounds_drawn = int(state["rounds_drawn"])


def _plain(state: dict) -> dict:
    """numpy's generator state with Python ints (it stores 128-bit integers, too wide for HDF5)."""
    return {k: _plain(v) if isinstance(v, dict) else (int(v) if isinstance(v, (int, np.integer)) else v)
            for k, v in state.items()}


def assign_to_ranks(clients: np.ndarray, sizes: np.ndarray, ranks: int) -> list[list[int]]:
    """Spread the round's clients over `ranks` trainer ranks balanced by sample count: largest client first to
    the least loaded rank (ties: the lower rank), each rank's clients in ascending id order."""
    load = np.zeros(ranks, dtype=np.int64)
    out: list[list[int]] = [[] for _ in range(ranks)]
    for k in sorted((int(c) for c in clients), key=lambda c: (-int(sizes[c]), c)):
        r = int(np.argmin(load))
        out[r].append(k)
        load[r] += int(sizes[k])
    return [sorted(x) for x in out]
