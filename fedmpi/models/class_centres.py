"""Class-centre partition and initialisation that do not depend on how many ranks hold the classifier.

Rows are generated in fixed chunks of CHUNK_ROWS, chunk c drawn from a generator seeded by (seed, c), so any
block [start, end) is produced without materialising the full matrix and equals the same rows of the
single-rank classifier built with the same seed.
"""
from __future__ import annotations

import numpy as np
import torch

CHUNK_ROWS = 4096
INIT_STD = 0.01


def shard_bounds(num_classes: int, shards: int, index: int) -> tuple[int, int]:
    """[start, end) of shard `index` among `shards` contiguous blocks; the first C mod n blocks get one more."""
    if not 0 <= index < shards:
        raise ValueError(f"shard index {index} outside [0, {shards})")
    base, extra = divmod(num_classes, shards)
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


def _chunk_generator(seed: int, chunk: int) -> torch.Generator:
    state = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(chunk)]).generate_state(2, np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def init_class_centres(seed: int, start: int, end: int, embedding_size: int,
                       dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Rows [start, end) of the N(0, INIT_STD²) class-centre matrix determined by `seed` (on CPU)."""
    out = torch.empty(end - start, embedding_size, dtype=dtype)
    for chunk in range(start // CHUNK_ROWS, (end - 1) // CHUNK_ROWS + 1 if end > start else 0):
        first = chunk * CHUNK_ROWS
        rows = torch.empty(CHUNK_ROWS, embedding_size, dtype=torch.float64)
        rows.normal_(0.0, INIT_STD, generator=_chunk_generator(seed, chunk))
        lo, hi = max(start, first), min(end, first + CHUNK_ROWS)
        out[lo - start:hi - start] = rows[lo - first:hi - first].to(dtype)
    return out
