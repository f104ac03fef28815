"""A rows part's step on the server, in both settings (algorithms/class_parts.py, RowsPart; core/class_kit.py): every
participant's class embeddings are one table W [C, d], participant k's rows a block of it, and a round steps on the
blocks it keeps (a silo party whose payload the server's check left out, a cross-device client not seen yet or left
out, is not among them). The setting supplies only where W lives: the parties' uploads received straight into their
blocks (silo/server_classes.py), the clients' rows in the store of their states (crossdevice/class_rows.py)."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def kept_rows(blocks: Sequence[tuple[int, int]], kept: Sequence[bool]) -> torch.Tensor | None:
    """The rows of W in the kept blocks, in block order; None when every block is kept (all of W)."""
    if all(kept):
        return None
    return torch.cat([torch.arange(a, b, dtype=torch.int64) for (a, b), k in zip(blocks, kept) if k])


def rows_of(blocks: torch.Tensor, per: int) -> torch.Tensor:
    """The rows of W in `blocks` [k] (ascending block indices) where every block holds `per` rows."""
    return (blocks.unsqueeze(1) * per + torch.arange(per)).reshape(-1)


def gathered(W: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    """W's rows `rows`: W itself for None (nothing gathered, the step in place), else a copy."""
    return W if rows is None else W[rows]


def step_kept(W: torch.Tensor, rows: torch.Tensor | None, step: Callable[[torch.Tensor], dict]) -> tuple:
    """(W', step(W')) with W' = gathered(W, rows), written back into W after the step when it is a copy."""
    kept = gathered(W, rows)
    row = step(kept)
    if rows is not None:
        W[rows] = kept
    return kept, row
