"""mpirun worker (imported by classifier_equivalence.py --party-gradients): a multi-rank party's mean gradient with
run.ddp_compression (silo/party_gradients.py) on gloo, float32.

- PartyGradients (the CPU parties' all-reduce): uncompressed, the exact mean; fp16 / bf16, each rank's share
  rounded to the 16-bit type and summed in it (2 ranks: bit for bit the sum of the two rounded shares).
- party_ddp (the GPU parties' DistributedDataParallel with the compression hook, run here on CPU over gloo): the
  gradient of a small model equals the mean of every rank's own gradient within the 16-bit type's rounding.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from fedmpi.silo.party_gradients import PartyGradients, party_ddp


def rank_grads(rank: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)
    return [torch.randn(7, 5, generator=g), torch.randn(11, generator=g)]


def check_party_gradients(group) -> None:
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    everyone = [rank_grads(r) for r in range(world)]
    for dtype in (None, torch.float16, torch.bfloat16):
        params = [torch.zeros(7, 5, requires_grad=True), torch.zeros(11, requires_grad=True)]
        averager = PartyGradients(params, group, dtype)
        averager.attach()
        for p, g in zip(params, rank_grads(rank)):
            p.grad.add_(g)
        averager.average()
        for k, p in enumerate(params):
            shares = [grads[k] / world for grads in everyone]
            if dtype is None:
                assert torch.allclose(p.grad, sum(shares), rtol=1e-6, atol=1e-7), "uncompressed mean"
            elif world == 2:
                want = (shares[0].to(dtype) + shares[1].to(dtype)).float()
                assert torch.equal(p.grad, want), f"{dtype} mean"


def check_ddp_compression(group) -> float:
    """The largest gradient error of DDP with each compression hook, relative to the gradients' scale: within
    the 16-bit type's rounding, and above float32's (the hook is in use: uncompressed, DDP's mean is float32's)."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    worst = 0.0
    for dtype, rounding in ((torch.float16, 2.0 ** -10), (torch.bfloat16, 2.0 ** -7)):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
        reference = [p.detach().clone().requires_grad_() for p in model.parameters()]
        x = torch.randn(4, 6, generator=torch.Generator().manual_seed(rank))
        ddp = party_ddp(model, group, bucket_mb=0.0001, compression=dtype)   # a bucket per parameter or so
        ddp(x).square().sum().backward()
        own = torch.func.functional_call(model, dict(zip([n for n, _ in model.named_parameters()], reference)), (x,))
        grads = torch.autograd.grad(own.square().sum(), reference)
        largest = 0.0
        for p, g in zip(model.parameters(), grads):
            gathered = [torch.empty_like(g) for _ in range(world)]
            dist.all_gather(gathered, g.contiguous(), group=group)
            mean = sum(gathered) / world
            largest = max(largest, (p.grad - mean).abs().max().item() / mean.abs().max().item())
        assert 16 * torch.finfo(torch.float32).eps < largest <= 4 * rounding, \
            f"DDP with {dtype} compression: {largest:.2e} of the mean"
        worst = max(worst, largest)
    return worst
