"""Partial-FC sampled negatives: which local class centres take part in one step's softmax.

Every positive class of the (gathered) batch is kept; the remaining slots up to int(sample_rate · rows) are
filled with negatives drawn uniformly from the local block by a generator seeded by (seed, step, shard), so
a run is reproducible. Rows not sampled get no logit and hence a zero gradient.
"""
from __future__ import annotations

import numpy as np
import torch


def sample_count(rows: int, sample_rate: float) -> int:
    return max(1, int(sample_rate * rows))


def sample_columns(local_targets: torch.Tensor, rows: int, sample_rate: float, seed: int, step: int,
                   shard: int) -> torch.Tensor:
    """Sorted indices (into the local block of `rows` centres) used this step; all of `local_targets` included.

    local_targets: the gathered labels that live on this shard, as local row indices (any order, repeats ok).
    """
    positives = torch.unique(local_targets)
    wanted = sample_count(rows, sample_rate)
    if positives.numel() >= wanted:
        return positives
    state = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(step), int(shard)]).generate_state(2, np.uint32)
    generator = torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))
    score = torch.rand(rows, generator=generator).to(local_targets.device)
    score[positives] = 2.0  # above any uniform draw: positives always win a slot
    return torch.topk(score, wanted, sorted=False).indices.sort().values
