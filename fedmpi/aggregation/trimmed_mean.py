"""Coordinate-wise trimmed mean (Yin et al. 2018, Alg. 1 option II; Flower's FedTrimmedAvg): in each coordinate
the ⌊βP⌋ largest and ⌊βP⌋ smallest values are dropped and the rest averaged. The weights are not used."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fedmpi.aggregation.aggregators import Aggregator
from fedmpi.aggregation.columns import by_columns, sorted_columns


@dataclass
class TrimmedMeanOptions:
    beta: float = 0.1      # fraction trimmed from each end

    def validate(self, uploads: int, fail) -> None:
        if not 0 <= self.beta < 0.5:
            fail("fed.aggregation.beta", f"must be in [0, 0.5), got {self.beta}")
        cut = math.floor(self.beta * uploads)
        if uploads - 2 * cut < 1:
            fail("fed.aggregation.beta", f"trims 2 x {cut} of {uploads} uploads, leaving none")


class TrimmedMean(Aggregator):
    name = "trimmed_mean"
    label = "Trimmed mean"
    needs_uploads = True
    Options = TrimmedMeanOptions

    def __call__(self, uploads, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        P = uploads.rows.shape[0]
        cut = math.floor(self.options.beta * P)
        return by_columns(uploads.rows, out, lambda block: sorted_columns(block)[cut:P - cut].mean(dim=0))
