"""What the server's steps on the stacked class embeddings W = [W_1; ...; W_P] share (FedAwS's spreadout, FedGC's
correction; docs/BASELINES.md): unit rows, the tangent projection that turns a gradient with respect to the unit
row ŵ into one with respect to the stored row w, and the anchor blocks that bound the memory of a step.

Rows are stored unnormalised (the margin heads normalise on use), so a loss written on ŵ = w/‖w‖ has
∂L/∂w = (I − ŵŵᵀ)(∂L/∂ŵ)/‖w‖ (spec §0.2); the steps do not renormalise the rows afterwards."""
from __future__ import annotations

import torch

BLOCK_ROWS = 2048   # anchor rows per block: a block's [rows, C] cosines and their exponentials in memory at once


def unit_rows(W: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(ŵ, ‖w‖): the rows on the unit sphere and their norms [C, 1] (a zero row stays zero)."""
    norms = torch.linalg.vector_norm(W, dim=1, keepdim=True)
    return W / norms.clamp_min(torch.finfo(W.dtype).tiny), norms


def tangent(grad_unit: torch.Tensor, unit: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
    """∂L/∂w from ∂L/∂ŵ (in place on grad_unit): (I − ŵŵᵀ) g / ‖w‖."""
    radial = (grad_unit * unit).sum(dim=1, keepdim=True)
    return grad_unit.sub_(unit * radial).div_(norms.clamp_min(torch.finfo(unit.dtype).tiny))


def blocks(start: int, end: int, rows: int):
    """[a, b) anchor blocks of at most `rows` rows covering [start, end)."""
    for a in range(start, end, rows):
        yield a, min(end, a + rows)


def bounds_of(rows: list[int]) -> list[tuple[int, int]]:
    """Each party's [start, end) in the stacked W from its row count n_k."""
    out, start = [], 0
    for n in rows:
        out.append((start, start + n))
        start += n
    return out
