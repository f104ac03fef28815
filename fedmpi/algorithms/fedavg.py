"""FedAvg (McMahan et al.): local (momentum) SGD for K steps, then Theta = sum_i w_i theta_i.
Also the rule behind the `centralized` and `solo` baselines (a single party: the average is its own model)."""
from __future__ import annotations

import torch

from fedmpi.algorithms.base import Algorithm, momentum_sgd_step


class FedAvg(Algorithm):
    name = "fedavg"

    def __init__(self, *, local_momentum: float = 0.0, weight_decay: float = 0.0, **_):
        super().__init__(weight_decay=weight_decay)
        self.local_momentum = local_momentum

    def init_trainer_state(self, params):
        if not self.local_momentum:
            return {}
        return {"momentum": [torch.zeros_like(p) for p in params]}

    def local_step(self, params, grads, lr, state):
        momentum_sgd_step(params, grads, lr, self.local_momentum, self.weight_decay, state.get("momentum"))
