"""Coordinate-wise rules over the [P, D] uploads, a block of columns at a time: sorting P x D values at once
would need P x D x 12 bytes (values and int64 indices), 3.5 GB for 12 uploads of IR-18."""
from __future__ import annotations

from typing import Callable

import torch

BLOCK = 1 << 18   # columns per block: P x 262,144 values


def by_columns(rows: torch.Tensor, out: torch.Tensor, combine: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """out[a:b] <- combine(rows[:, a:b]) block by block (combine maps [P, n] to [n]); returns out."""
    D = rows.shape[1]
    for a in range(0, D, BLOCK):
        b = min(a + BLOCK, D)
        out[a:b] = combine(rows[:, a:b])
    return out


def sorted_columns(block: torch.Tensor) -> torch.Tensor:
    return block.sort(dim=0).values


def median_of_sorted(s: torch.Tensor) -> torch.Tensor:
    """The median of each column of sorted values: the middle one, or the mean of the two middle ones (numpy's)."""
    n = s.shape[0]
    return (s[(n - 1) // 2] + s[n // 2]) / 2
