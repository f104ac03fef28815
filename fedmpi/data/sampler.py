"""The deterministic, resumable batch stream of one trainer rank."""
from __future__ import annotations

from typing import Iterator

import numpy as np


class ShardBatchSampler:
    """Infinite batches of (index, flip) for rank `rank` of `world` ranks sharing `n_items` items.

    Pass p draws a permutation of all items and a flip bit per position from a generator seeded by
    (seed, p); the rank keeps perm[rank::world] of the first world * (n_items // world) positions, so all
    ranks see equally many items per pass and shards of one pass are disjoint. The rank's passes are
    concatenated into one stream cut into batches of `batch_size`; batch k is the same whether the
    stream starts at 0 or at start_step = k (checkpoint resume).
    """

    def __init__(self, n_items: int, rank: int, world: int, batch_size: int, seed: int, start_step: int = 0):
        if world < 1 or not 0 <= rank < world:
            raise ValueError(f"rank {rank} must lie in 0..{world - 1}")
        if n_items < world:
            raise ValueError(f"{n_items} items cannot be sharded over {world} ranks")
        if batch_size < 1 or start_step < 0:
            raise ValueError(f"batch_size must be >= 1 and start_step >= 0 (got {batch_size}, {start_step})")
        self.n_items, self.rank, self.world = n_items, rank, world
        self.batch_size, self.seed, self.start_step = batch_size, seed, start_step
        self.per_pass = n_items // world

    def shard(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        """(indices, flips) this rank reads in pass p."""
        rng = np.random.default_rng([self.seed, p])
        perm = rng.permutation(self.n_items)
        flips = rng.random(self.n_items) < 0.5
        used = self.per_pass * self.world
        return perm[:used][self.rank::self.world], flips[:used][self.rank::self.world]

    def __iter__(self) -> Iterator[list[tuple[int, bool]]]:
        position = self.start_step * self.batch_size
        p, offset = divmod(position, self.per_pass)
        indices, flips = self.shard(p)
        while True:
            batch = []
            while len(batch) < self.batch_size:
                if offset == self.per_pass:
                    p, offset = p + 1, 0
                    indices, flips = self.shard(p)
                take = min(self.batch_size - len(batch), self.per_pass - offset)
                batch.extend(zip(indices[offset:offset + take].tolist(), flips[offset:offset + take].tolist()))
                offset += take
            yield batch
