"""FedMedian: the coordinate-wise median of the uploads (Yin et al. 2018; Flower's FedMedian). The weights are
not used: a median that a party's weight could move would not be robust to that party."""
from __future__ import annotations

import torch

from fedmpi.aggregation.aggregators import Aggregator, NoOptions
from fedmpi.aggregation.columns import by_columns, median_of_sorted, sorted_columns


class Median(Aggregator):
    name = "median"
    label = "FedMedian"
    needs_uploads = True
    Options = NoOptions

    def __call__(self, uploads, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return by_columns(uploads.rows, out, lambda block: median_of_sorted(sorted_columns(block)))
