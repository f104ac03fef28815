"""The shape every federated rule shares: a trainer-side local step on the backbone parameters and a
server-side update from the weighted average of the parties' backbones. No MPI here: the roles move the
tensors, these functions only do the arithmetic on them.

Tensors are lists of parameter tensors (a flat buffer is a list of one). `state` is a plain dict of tensors
owned by the caller, so that checkpoints can save it as is.
"""
from __future__ import annotations

import torch


class Algorithm:
    name = "base"

    def __init__(self, *, weight_decay: float = 0.0, **_):
        self.weight_decay = weight_decay

    # ---- trainer side
    def init_trainer_state(self, params: list[torch.Tensor]) -> dict:
        return {}

    def local_step(self, params: list[torch.Tensor], grads: list[torch.Tensor], lr: float, state: dict) -> None:
        raise NotImplementedError

    def on_global(self, previous: torch.Tensor, new: torch.Tensor, lr: float, state: dict) -> None:
        """Called on every trainer after a round with the previous and new global parameters (flat)."""

    # ---- server side
    def init_server_state(self, theta: torch.Tensor) -> dict:
        return {}

    def server_update(self, theta: torch.Tensor, average: torch.Tensor, state: dict) -> torch.Tensor:
        """New global parameters from the current ones and the weighted average sum_i w_i theta_i (eq. 4)."""
        return average


def add_weight_decay(grads: list[torch.Tensor], params: list[torch.Tensor], weight_decay: float) -> None:
    if weight_decay:
        torch._foreach_add_(grads, params, alpha=weight_decay)


def momentum_sgd_step(params, grads, lr: float, momentum: float, weight_decay: float, buffers: list | None):
    """PyTorch's SGD (no dampening, not Nesterov): buf <- momentum*buf + g; p <- p - lr*buf. Mutates grads."""
    add_weight_decay(grads, params, weight_decay)
    if momentum:
        torch._foreach_mul_(buffers, momentum)
        torch._foreach_add_(buffers, grads)
        torch._foreach_add_(params, buffers, alpha=-lr)
    else:
        torch._foreach_add_(params, grads, alpha=-lr)
