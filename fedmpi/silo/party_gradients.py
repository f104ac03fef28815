"""The party's mean backbone gradient on CPU, what DistributedDataParallel gives a multi-rank party: after backward,
each rank's gradients times 1/n go into one flat buffer kept across steps, one all-reduce (sum) over the party
group, and back into the gradients. DDP is not used because its constructor imports torch._dynamo (1.3 s of CPU
and 150 MB per rank). What else DDP does is not needed here: the ranks of a party start every round from the same
Θ (the intra-party broadcast), and the BN running statistics DDP copies from the party's first rank before each
forward are read nowhere but on that rank (the leader, whose state is the party's upload).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from fedmpi import comm


class PartyGradients:
    def __init__(self, params: list[torch.Tensor], group):
        self.params, self.group = list(params), group
        self.scale = 1.0 / dist.get_world_size(group)
        self.flat = torch.empty(sum(p.numel() for p in self.params), dtype=self.params[0].dtype,
                                device=self.params[0].device)

    @torch.no_grad()
    def average(self) -> None:
        """Every rank of the party calls this after backward; each gradient becomes the party's mean."""
        for p in self.params:
            if p.grad is None:      # unused on this rank: it adds nothing, and receives the party's mean
                p.grad = torch.zeros_like(p)
        comm.flatten([p.grad for p in self.params], out=self.flat).mul_(self.scale)
        dist.all_reduce(self.flat, group=self.group)
        comm.unflatten_into(self.flat, [p.grad for p in self.params])
