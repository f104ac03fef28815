"""A module's state as one flat buffer and back: the layout every payload, checkpoint and exchange shares."""
from __future__ import annotations

from typing import Iterable

import torch


def state_tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    """Parameters, then floating-point buffers (BN running stats) — what a backbone's state is made of.

    Integer buffers (num_batches_tracked) are left out: they are counters, not averaged state.
    """
    params = [p for p in module.parameters()]
    buffers = [b for b in module.buffers() if b.is_floating_point()]
    return params + buffers


def flatten(tensors: Iterable[torch.Tensor], out: torch.Tensor | None = None) -> torch.Tensor:
    """Copy tensors into one contiguous 1-D buffer (allocated when `out` is None)."""
    tensors = list(tensors)
    total = sum(t.numel() for t in tensors)
    if out is None:
        out = torch.empty(total, dtype=tensors[0].dtype, device=tensors[0].device)
    offset = 0
    for t in tensors:
        n = t.numel()
        out[offset:offset + n].copy_(t.detach().reshape(-1))
        offset += n
    return out


def unflatten_into(flat: torch.Tensor, tensors: Iterable[torch.Tensor]) -> None:
    """Copy a flat buffer back into the given tensors (in place, same order as `flatten`)."""
    offset = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(flat[offset:offset + n].view_as(t))
            offset += n
