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


def centred_products(rows: torch.Tensor, vector: torch.Tensor | None = None):
    """In float64, a block of columns at a time, with m the mean of the rows: the [P, P] Gram matrix of the rows
    minus m (the centring keeps near-equal models from cancelling), exactly symmetric (a BLAS may round x_i·x_j and
    x_j·x_i apart, which made ties between uploads depend on the machine), and, with `vector` [D], the [P] products
    (rows − m)(vector − m) and ‖vector − m‖²."""
    P, D = rows.shape
    gram = torch.zeros(P, P, dtype=torch.float64, device=rows.device)
    products = torch.zeros(P, dtype=torch.float64, device=rows.device)
    norm = torch.zeros((), dtype=torch.float64, device=rows.device)
    for a in range(0, D, BLOCK):
        block = rows[:, a:a + BLOCK].to(torch.float64)
        mean = block.mean(dim=0)
        block = block - mean
        gram += block @ block.t()
        if vector is not None:
            x = vector[a:a + BLOCK].to(torch.float64) - mean
            products += block @ x
            norm += x @ x
    return (gram + gram.t()) / 2, products, norm
