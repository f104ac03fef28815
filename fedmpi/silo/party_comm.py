"""The collectives a method's part may need inside its party, offered by the silo (the parts under
fedmpi/algorithms do arithmetic only and import no torch.distributed): this rank's place, a party-wide gather of
rows and a broadcast from the leader. One rank: the identity."""
from __future__ import annotations

import torch
import torch.distributed as dist

from fedmpi.models.sharded import _all_gather_rows, _gather_sizes


class PartyCollectives:
    """`group`: the party's process group (None: one rank); `rank`: this rank's place in the party; `leader`: the
    party leader's global rank."""

    def __init__(self, group, rank: int, ranks: int, leader: int):
        self.group, self.rank, self.ranks, self.leader = group, rank, ranks, leader

    def gather_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """Every rank's rows in rank order, on every rank (ranks may hold different row counts)."""
        if self.group is None:
            return rows
        return _all_gather_rows(rows, _gather_sizes(rows.shape[0], rows.device, self.group), self.group)

    def broadcast(self, tensor: torch.Tensor) -> None:
        """The leader's `tensor` into every rank's, in place."""
        if self.group is not None:
            dist.broadcast(tensor, src=self.leader, group=self.group)
