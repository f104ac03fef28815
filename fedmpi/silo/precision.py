"""Mixed precision for GPU runs: bf16 autocast, or fp16 autocast with dynamic loss scaling. On CPU, or with
amp = none, every call is a no-op.

fp16's overflow check costs one host sync a step: torch's fused unscale (the kernel GradScaler uses) divides
every gradient by the scale and raises one found-inf flag on the device; the flag is reduced (MAX) over the
party's ranks, so that they all skip the same steps (their classifier shards' gradients differ, and one rank
stepping where another skips would split the party's backbone), and read once."""
from __future__ import annotations

import contextlib
from collections import defaultdict

import torch
import torch.distributed as dist


def unscale_found_inf(grads: list[torch.Tensor], inv_scale: float, device: torch.device) -> torch.Tensor:
    """grads *= inv_scale in place; returns a [1] float flag on `device`, 1 where any gradient is not finite."""
    found = torch.zeros(1, dtype=torch.float32, device=device)
    inv = torch.full((1,), inv_scale, dtype=torch.float32, device=device)
    by_dtype: dict = defaultdict(list)
    for g in grads:
        by_dtype[g.dtype].append(g)
    for same in by_dtype.values():
        torch._amp_foreach_non_finite_check_and_unscale_(same, found, inv)
    return found


class Precision:
    def __init__(self, amp: str, device: torch.device, init_scale: float = 2.0 ** 16, growth_interval: int = 2000,
                 group=None, weight_cache: bool = True):
        self.enabled = amp != "none" and device.type == "cuda"
        self.weight_cache = weight_cache   # autocast's cast weights kept for the step; off for CUDA graphs' capture
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
        self.device = device
        self.scaling = self.enabled and amp == "fp16"
        self.scale = init_scale
        self.growth_interval = growth_interval
        self.group = group          # the party's ranks, who decide every skip together
        self._good_steps = 0

    def autocast(self):
        if not self.enabled:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype, cache_enabled=self.weight_cache)

    def backward(self, loss: torch.Tensor) -> None:
        (loss * self.scale if self.scaling else loss).backward()

    def state_dict(self) -> dict:
        return {"scale": self.scale, "good_steps": self._good_steps}

    def load_state_dict(self, state: dict) -> None:
        self.scale = float(state["scale"])
        self._good_steps = int(state["good_steps"])

    def unscale_and_check(self, params) -> bool:
        """Divide grads by the loss scale; False (skip the step, halve the scale) when any is not finite on any
        rank of the party."""
        if not self.scaling:
            return True
        grads = [p.grad for p in params if p.grad is not None]
        found = unscale_found_inf(grads, 1.0 / self.scale, self.device)
        if self.group is not None:
            dist.all_reduce(found, op=dist.ReduceOp.MAX, group=self.group)
        if found.item() > 0:            # the step's one host sync
            self.scale /= 2.0
            self._good_steps = 0
            return False
        self._good_steps += 1
        if self._good_steps % self.growth_interval == 0:
            self.scale *= 2.0
        return True
