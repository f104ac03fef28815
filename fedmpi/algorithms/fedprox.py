"""FedProx (Li et al. 2020, eq. 2): each party minimises its loss plus the proximal term μ/2 ‖θ − Θ‖², Θ the
global model of the round's start; its gradient μ (θ − Θ) is added to the local gradient. μ = 0 is FedAvg
exactly (the term is skipped, not multiplied by zero)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.errors import ConfigError


@dataclass
class FedProxOptions:
    mu: float = 0.01                 # proximal strength μ (Li et al. try 0.001 .. 1)

    def validate(self, cfg) -> None:
        if not self.mu >= 0:
            raise ConfigError(f"fed.options.mu: must be >= 0, got {self.mu}")


class FedProx(FedAvg):
    name = "fedprox"
    label, colour = "FedProx", "#2ca02c"     # in tables and figures (analysis/methods.py)
    Options = FedProxOptions
    local_momentum_default = 0.0     # Li et al. 2020: plain SGD on the proximal local objective

    def correct(self, params, grads, rnd, state):
        import torch

        mu = self.options.mu
        if mu:
            torch._foreach_add_(grads, params, alpha=mu)                 # + μ θ
            torch._foreach_add_(grads, rnd.global_params, alpha=-mu)     # − μ Θ
