"""FedAvgM (Hsu et al. 2019): FedAvg with server momentum.
Delta = Theta - sum_i w_i theta_i;  v <- beta*v + Delta;
Theta <- Theta - eta_s*(beta*v + Delta)  (Nesterov)  or  Theta <- Theta - eta_s*v  (heavy ball)."""
from __future__ import annotations

import torch

from fedmpi.algorithms.fedavg import FedAvg


class FedAvgM(FedAvg):
    name = "fedavgm"

    def __init__(self, *, server_momentum: float = 0.9, server_lr: float = 1.0, nesterov: bool = True, **kw):
        super().__init__(**kw)
        self.server_momentum = server_momentum
        self.server_lr = server_lr
        self.nesterov = nesterov

    def init_server_state(self, theta):
        return {"velocity": torch.zeros_like(theta)}

    def server_update(self, theta, average, state):
        delta = theta - average
        v = state["velocity"]
        v.mul_(self.server_momentum).add_(delta)
        step = delta.add(v, alpha=self.server_momentum) if self.nesterov else v
        return theta - self.server_lr * step
