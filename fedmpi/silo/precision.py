"""Mixed precision for GPU runs: bf16 autocast, or fp16 autocast with dynamic loss scaling. On CPU, or with
amp = none, every call is a no-op."""
from __future__ import annotations

import contextlib

import torch


class Precision:
    def __init__(self, amp: str, device: torch.device, init_scale: float = 2.0 ** 16, growth_interval: int = 2000):
        self.enabled = amp != "none" and device.type == "cuda"
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
        self.device = device
        self.scaling = self.enabled and amp == "fp16"
        self.scale = init_scale
        self.growth_interval = growth_interval
        self._good_steps = 0

    def autocast(self):
        if not self.enabled:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (loss * self.scale if self.scaling else loss).backward()

    def state_dict(self) -> dict:
        return {"scale": self.scale, "good_steps": self._good_steps}

    def load_state_dict(self, state: dict) -> None:
        self.scale = float(state["scale"])
        self._good_steps = int(state["good_steps"])

    def unscale_and_check(self, params) -> bool:
        """Divide grads by the loss scale; False (skip the step, halve the scale) when any is not finite."""
        if not self.scaling:
            return True
        grads = [p.grad for p in params if p.grad is not None]
        torch._foreach_mul_(grads, 1.0 / self.scale)
        finite = all(bool(torch.isfinite(g).all()) for g in grads)
        if not finite:
            self.scale /= 2.0
            self._good_steps = 0
            return False
        self._good_steps += 1
        if self._good_steps % self.growth_interval == 0:
            self.scale *= 2.0
        return True
