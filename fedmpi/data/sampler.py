"""The deterministic, resumable batch stream of one trainer rank, cut from its party's stream."""
from __future__ import annotations

from typing import Iterator

import numpy as np


class ShardBatchSampler:
    """Infinite batches of (index, flip) for rank `rank` of `world` ranks sharing `n_items` items.

    The party's stream does not depend on its rank count: pass p is a permutation of all items with a flip bit
    per position, drawn from a generator seeded by (seed, p), and the passes are concatenated. Party step k
    reads the G = world * batch_size positions [kG, (k+1)G) of that stream; rank r takes the positions
    kG + j * world + r (j < batch_size). So with G kept, a party of 2 ranks x 32 and one of 1 rank x 64 read
    the same images with the same flips at every step (a checkpoint moved between rank counts continues the
    same stream), and batch k is the same whether the stream starts at 0 or at start_step = k.

    steps_per_pass = s > 0 cuts each pass into s steps instead, the pass's last n_items − sG positions dropped (a
    shuffled DataLoader's drop_last: a round of whole local epochs); sG must not exceed n_items. `seed` may be a
    sequence of integers (a round's own stream: run seed, party, round).
    """

    def __init__(self, n_items: int, rank: int, world: int, batch_size: int, seed, start_step: int = 0,
                 steps_per_pass: int = 0):
        if world < 1 or not 0 <= rank < world:
            raise ValueError(f"rank {rank} must lie in 0..{world - 1}")
        if n_items < world:
            raise ValueError(f"{n_items} items cannot be sharded over {world} ranks")
        if batch_size < 1 or start_step < 0:
            raise ValueError(f"batch_size must be >= 1 and start_step >= 0 (got {batch_size}, {start_step})")
        self.n_items, self.rank, self.world = n_items, rank, world
        self.batch_size, self.seed, self.start_step = batch_size, seed, start_step
        self.party_batch = world * batch_size
        if steps_per_pass < 0 or steps_per_pass * self.party_batch > n_items:
            raise ValueError(f"{steps_per_pass} steps of {self.party_batch} images do not fit a pass of {n_items}")
        self.steps_per_pass = steps_per_pass

    def pass_order(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        """(indices, flips) of the party's pass p, position by position."""
        rng = np.random.default_rng([*np.atleast_1d(self.seed).tolist(), p])
        return rng.permutation(self.n_items), rng.random(self.n_items) < 0.5

    def __iter__(self) -> Iterator[list[tuple[int, bool]]]:
        own = self.rank + self.world * np.arange(self.batch_size, dtype=np.int64)
        passes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        step = self.start_step
        while True:
            if self.steps_per_pass:
                passes_of = np.full(self.batch_size, step // self.steps_per_pass, dtype=np.int64)
                offsets = (step % self.steps_per_pass) * self.party_batch + own
            else:
                passes_of, offsets = np.divmod(step * self.party_batch + own, self.n_items)
            for p in set(passes_of.tolist()) - set(passes):
                passes[p] = self.pass_order(p)
            for p in [p for p in passes if p < passes_of[0]]:
                del passes[p]
            yield [(int(passes[p][0][o]), bool(passes[p][1][o])) for p, o in zip(passes_of.tolist(), offsets.tolist())]
            step += 1
