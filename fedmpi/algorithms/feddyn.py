"""FedDyn (Acar et al. 2021, "Federated Learning Based on Dynamic Regularization", Alg. 1).
Client k minimises its loss with a linear and a proximal term that change every round:
    θ_k^t = argmin_θ  L_k(θ) − ⟨∇L_k(θ_k^{t−1}), θ⟩ + α/2 ‖θ − θ^{t−1}‖²
Trainer, each local step:   θ ← θ − η (g − λ_k + α (θ − Θ))       λ_k = ∇L_k(θ_k^{t−1}), 0 at the start
after the K steps:          λ_k ← λ_k − α (θ_k − Θ)                 (the first-order condition of the argmin)
Server:                     h ← h − α (|P|/m) Σ_k w_k (θ_k − Θ)      (|P|/m = the exchange's participation)
                            Θ ← Σ_k w_k θ_k − h / α
With all parties in every round and h, λ_k starting at 0, h stays the w-weighted mean of the λ_k, as the paper's
(1/m) Σ_k λ_k with uniform w. Nothing travels besides θ_k and Θ: λ_k stays with its party, h with the server.
"""
from __future__ import annotations

from dataclasses import dataclass

from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.errors import ConfigError


@dataclass
class FedDynOptions:
    alpha: float = 0.01              # α, the regulariser's strength (the paper tries 0.001 .. 0.1)

    def validate(self, cfg) -> None:
        if not self.alpha > 0:
            raise ConfigError(f"fed.options.alpha: must be > 0, got {self.alpha}")
        if cfg.fed.server.lr not in (None, 1.0):
            raise ConfigError(f"fed.server.lr: FedDyn's server step has no learning rate (Θ = mean − h/α), "
                              f"got {cfg.fed.server.lr}")


class FedDyn(FedAvg):
    name = "feddyn"
    label, colour = "FedDyn", "#17becf"     # in tables and figures (analysis/methods.py)
    Options = FedDynOptions
    fixed_server_optimizer = True    # sgd: the server step is FedDyn's own
    client_state = ("linear",)       # λ_k: the client's own, across the rounds it takes part in
    trainer_tensors, server_tensors = 1, 1
    local_momentum_default = 0.0     # Acar et al. 2021: plain SGD on the regularised local objective

    def init_trainer_state(self, params):
        import torch

        return {**super().init_trainer_state(params), "linear": [torch.zeros_like(p) for p in params]}

    def correct(self, params, grads, rnd, state):
        import torch

        alpha = self.options.alpha
        torch._foreach_sub_(grads, state["linear"])                     # − λ_k
        torch._foreach_add_(grads, params, alpha=alpha)                 # + α θ
        torch._foreach_add_(grads, rnd.global_params, alpha=-alpha)     # − α Θ

    def end_round(self, params, rnd, state):
        import torch

        alpha = self.options.alpha
        torch._foreach_add_(state["linear"], params, alpha=-alpha)              # λ_k − α θ_k
        torch._foreach_add_(state["linear"], rnd.global_params, alpha=alpha)    # + α Θ

    def init_server_state(self, theta, down=None):
        import torch

        return {"h": torch.zeros_like(theta)}

    def server_update(self, theta, mean, state, participation=1.0):
        alpha, h = self.options.alpha, state["h"]
        h.add_(mean["theta"], alpha=-alpha * participation).add_(theta, alpha=alpha * participation)
        return theta.copy_(mean["theta"]).sub_(h, alpha=1.0 / alpha)
