"""Momentum SGD with weight decay (the classifier's optimizer, eq. 1-2), step for step the arithmetic of
torch.optim.SGD (dampening 0, no Nesterov): the same foreach operations in the same order as its multi-tensor
path (on CPU each foreach operation runs its single-tensor kernel, as torch's single-tensor path does), and the
same state_dict, so checkpoints written with either load into the other. torch.optim is not used because its
`_disable_dynamo` and `_use_grad` wrappers import torch._dynamo on first use, which every rank would pay for
(docs/PERFORMANCE.md gives the cost).
"""
from __future__ import annotations

import torch

# the hyper-parameters torch.optim.SGD keeps in a param group (and its state_dict), with their values here
FIXED = {"dampening": 0, "nesterov": False, "maximize": False, "foreach": None, "differentiable": False,
         "fused": None}


class MomentumSGD:
    """`fused`: the whole step as torch's one fused SGD kernel (torch.optim.SGD(fused=True)'s), the same
    arithmetic in one pass over the parameters instead of three foreach passes; equal within rounding."""

    def __init__(self, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0, fused: bool = False):
        params = list(params)
        if not params:
            raise ValueError("MomentumSGD: no parameters to optimise")
        self.param_groups = [{"params": params, "lr": lr, "momentum": momentum, "weight_decay": weight_decay,
                              **FIXED}]
        self.momentum_buffers: list[torch.Tensor | None] = [None] * len(params)
        self.fused = fused

    def reset(self) -> None:
        """Forget the momentum: the next step starts as a new optimizer's (its buffer is that step's gradient)."""
        self.momentum_buffers = [None] * len(self.momentum_buffers)

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        momentum, weight_decay = group["momentum"], group["weight_decay"]
        live = [i for i, p in enumerate(group["params"]) if p.grad is not None]
        if not live:
            return
        params = [group["params"][i] for i in live]
        grads = [p.grad for p in params]
        if self.fused and self._fused_step(live, params, grads, group):
            return
        if weight_decay != 0:
            grads = torch._foreach_add(grads, params, alpha=weight_decay)
        if momentum != 0:
            buffers = [self.momentum_buffers[i] for i in live]
            if all(b is not None for b in buffers):
                torch._foreach_mul_(buffers, momentum)
                torch._foreach_add_(buffers, grads, alpha=1)
            else:
                for k, (i, g) in enumerate(zip(live, grads)):
                    if buffers[k] is None:
                        buffers[k] = self.momentum_buffers[i] = g.detach().clone()
                    else:
                        buffers[k].mul_(momentum).add_(g, alpha=1)
            grads = buffers
        torch._foreach_add_(params, grads, alpha=-group["lr"])

    def _fused_step(self, live, params, grads, group) -> bool:
        """One fused kernel (buffer = grad + wd p on the first step, momentum buffer + grad + wd p after it;
        p -= lr buffer); False where the parameters' buffers are in mixed states (some stepped, some not)."""
        momentum = group["momentum"]
        buffers = [self.momentum_buffers[i] for i in live] if momentum != 0 else []
        first = bool(buffers) and buffers[0] is None
        if any((b is None) != first for b in buffers):
            return False
        if first:
            buffers = [torch.empty_like(p) for p in params]
            for i, b in zip(live, buffers):
                self.momentum_buffers[i] = b
        torch._fused_sgd_(params, grads, buffers, weight_decay=group["weight_decay"], momentum=momentum,
                          lr=group["lr"], dampening=0.0, nesterov=False, maximize=False, is_first_step=first)
        return True

    def state_dict(self) -> dict:
        """torch.optim.SGD's layout: parameters by index, a momentum buffer for each one stepped so far."""
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        group["params"] = list(range(len(self.param_groups[0]["params"])))
        state = {i: {"momentum_buffer": b} for i, b in enumerate(self.momentum_buffers) if b is not None}
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, saved: dict) -> None:
        params = self.param_groups[0]["params"]
        groups = saved["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(params):
            raise ValueError(f"optimizer state: {sum(len(g['params']) for g in groups)} parameters in "
                             f"{len(groups)} groups, expected {len(params)} in 1")
        self.param_groups[0].update({k: v for k, v in groups[0].items() if k != "params"})
        buffers: list[torch.Tensor | None] = [None] * len(params)
        for i, (index, p) in enumerate(zip(groups[0]["params"], params)):
            buffer = saved["state"].get(index, {}).get("momentum_buffer")
            if buffer is not None:
                buffers[i] = buffer.to(device=p.device, dtype=p.dtype).clone()
        self.momentum_buffers = buffers
