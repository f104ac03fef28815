"""The party's mean backbone gradient on CPU, what DistributedDataParallel gives a multi-rank party: after backward,
each rank's gradients (views of one flat buffer kept across steps, which backward fills) are scaled by 1/n and
summed over the party group by one all-reduce of that buffer. DDP is not used because its constructor imports
torch._dynamo on every rank (its cost: docs/PERFORMANCE.md). What else DDP does is not needed here: the ranks of a party start every round from the same
Θ (the intra-party broadcast), and the BN running statistics DDP copies from the party's first rank before each
forward are read nowhere but on that rank (the leader, whose state is the party's upload).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from fedmpi.algorithms.base import views


class PartyGradients:
    """`compression` (run.ddp_compression): None, or torch.float16 / torch.bfloat16 to all-reduce the gradients
    in that dtype (half the bytes on the wire; each rank's share is rounded to it once, the sum is formed in it),
    as DDP's fp16/bf16 compression hooks do."""

    def __init__(self, params: list[torch.Tensor], group, compression: torch.dtype | None = None):
        self.params, self.group = list(params), group
        self.scale = 1.0 / dist.get_world_size(group)
        self.flat = torch.zeros(sum(p.numel() for p in self.params), dtype=self.params[0].dtype,
                                device=self.params[0].device)
        self.grads = views(self.flat, self.params)
        self.wire = None if compression is None else torch.empty(self.flat.shape, dtype=compression,
                                                                  device=self.flat.device)

    @torch.no_grad()
    def attach(self) -> None:
        """Before backward: each gradient is its view of the flat buffer, zeroed, which backward adds into (as
        DDP's gradient_as_bucket_view does): the gradients and the buffer are one allocation, not two."""
        self.flat.zero_()
        for p, g in zip(self.params, self.grads):
            p.grad = g

    @torch.no_grad()
    def average(self) -> None:
        """Every rank of the party calls this after backward; each gradient becomes the party's mean (a parameter
        unused on this rank adds its zeros and receives the party's mean)."""
        self.flat.mul_(self.scale)
        if self.wire is None:
            dist.all_reduce(self.flat, group=self.group)
            return
        self.wire.copy_(self.flat)
        dist.all_reduce(self.wire, group=self.group)
        self.flat.copy_(self.wire)


COMPRESSION = {"none": None, "fp16": torch.float16, "bf16": torch.bfloat16}


def party_ddp(backbone, group, bucket_mb: float, compression: torch.dtype | None):
    """DistributedDataParallel over the party's ranks (GPU parties): gradient buckets of `bucket_mb` MB
    all-reduced as backward fills them, each in 16 bits where `compression` says (DDP's fp16/bf16 compression
    hooks, as insightface's arcface_torch uses)."""
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(backbone, process_group=group, bucket_cap_mb=bucket_mb)
    if compression is not None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp.register_comm_hook(group, default_hooks.fp16_compress_hook if compression == torch.float16
                               else default_hooks.bf16_compress_hook)
    return ddp


def party_model(backbone, trainable, group, run, device):
    """(the module to run forward, the gradient averager) of a party's rank. One rank: neither. GPU: DDP, which
    overlaps the all-reduce with backward (its torch._dynamo import is small next to a GPU run). CPU: one
    all-reduce after backward (PartyGradients), without DDP's import of torch._dynamo (its cost per rank:
    docs/PERFORMANCE.md). `run`: the config's run section."""
    if group is None:
        return backbone, None
    compression = COMPRESSION[run.ddp_compression]
    if device.type == "cuda":
        return party_ddp(backbone, group, run.ddp_bucket_mb, compression), None
    return backbone, PartyGradients(trainable, group, compression)
