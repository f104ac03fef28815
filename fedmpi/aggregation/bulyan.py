"""Bulyan (El Mhamdi et al. 2018): Krum chooses θ = n − 2f uploads one at a time (each time over those not yet
chosen), then in each coordinate the β = θ − 2f chosen values nearest their median are averaged (ties to the
lower party index). Needs n ≥ 4f + 3 uploads. The weights are not used."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from fedmpi.aggregation.aggregators import Aggregator
from fedmpi.aggregation.columns import by_columns, median_of_sorted
from fedmpi.aggregation.krum import krum_scores, lowest, squared_distances


@dataclass
class BulyanOptions:
    f: int = 1

    def validate(self, uploads: int, fail) -> None:
        if self.f < 0:
            fail("fed.aggregation.f", f"must be >= 0, got {self.f}")
        if not uploads >= 4 * self.f + 3:
            fail("fed.aggregation.f", f"bulyan needs n >= 4f + 3 uploads: n = {uploads}, f = {self.f} "
                                      f"(at most f = {max((uploads - 3) // 4, 0)} with {uploads} uploads)")


def krum_selection(distances: torch.Tensor, f: int, count: int) -> list[int]:
    """Krum applied `count` times, each over the uploads not yet selected (their distances already known)."""
    left = list(range(distances.shape[0]))
    chosen = []
    while len(chosen) < count:
        sub = distances[left][:, left]
        pick = left[int(lowest(krum_scores(sub, f), 1)[0])]
        chosen.append(pick)
        left.remove(pick)
    return sorted(chosen)


def mean_nearest_median(block: torch.Tensor, beta: int) -> torch.Tensor:
    median = median_of_sorted(block.sort(dim=0).values)
    nearest = (block - median).abs().argsort(dim=0, stable=True)[:beta]
    return block.gather(0, nearest).mean(dim=0)


class Bulyan(Aggregator):
    name = "bulyan"
    label = "Bulyan"
    needs_uploads = True
    Options = BulyanOptions

    def __call__(self, uploads, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        rows, f = uploads.rows, self.options.f
        theta = rows.shape[0] - 2 * f
        chosen = torch.tensor(krum_selection(squared_distances(rows), f, theta), device=rows.device)
        return by_columns(rows, out, lambda block: mean_nearest_median(block[chosen], theta - 2 * f))
