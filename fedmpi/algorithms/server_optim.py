"""Server optimizers on the pseudo-gradient Δ = Θ − Σ_i w_i θ_i (Reddi et al., Adaptive Federated
Optimization, 2021, Alg. 2, with Δ of the opposite sign: their Δ_t is our −Δ).

  sgd       Θ ← Θ − η Δ                                      (η = 1: FedAvg, Θ = Σ w_i θ_i exactly)
  momentum  v ← β v + Δ;  Θ ← Θ − η (β v + Δ) (Nesterov) or Θ ← Θ − η v (heavy ball)     (FedAvgM, Hsu)
  adam      m ← β1 m + (1−β1) Δ;  v ← β2 v + (1−β2) Δ²                    Θ ← Θ − η m / (√v + τ)
  yogi      m as adam;            v ← v − (1−β2) Δ² sign(v − Δ²)          Θ ← Θ − η m / (√v + τ)
  adagrad   m as adam;            v ← v + Δ²                              Θ ← Θ − η m / (√v + τ)
v starts at τ² (Reddi et al.: v_{−1} ≥ τ²), m at 0; no bias correction (as in the paper).
Every step works in place on Θ and on the state; the state is a dict of tensors (checkpointed as is).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

OPTIMIZERS = ("sgd", "momentum", "adam", "yogi", "adagrad")
DEFAULT_LR = {"sgd": 1.0, "momentum": 1.0, "adam": 0.01, "yogi": 0.01, "adagrad": 0.01}


class ServerOptimizer:
    averages = False    # True: the step is Θ ← Σ w_i θ_i exactly, so the average may be formed straight into Θ

    def __init__(self, lr: float):
        self.lr = lr

    @staticmethod
    def build(name: str, lr: float | None = None, momentum: float = 0.9, nesterov: bool = True,
              beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3) -> "ServerOptimizer":
        lr = DEFAULT_LR[name] if lr is None else lr
        if name == "sgd":
            return SGD(lr)
        if name == "momentum":
            return Momentum(lr, momentum, nesterov)
        if name in ("adam", "yogi", "adagrad"):
            return Adaptive(lr, name, beta1, beta2, tau)
        raise ValueError(f"fed.server.optimizer: unknown server optimizer {name!r} (known: {', '.join(OPTIMIZERS)})")

    def init(self, theta: torch.Tensor) -> dict:
        return {}

    def apply(self, theta: torch.Tensor, mean: torch.Tensor, state: dict) -> torch.Tensor:
        delta = theta - mean
        theta.sub_(self.step(delta, state), alpha=self.lr)
        return theta

    def step(self, delta: torch.Tensor, state: dict) -> torch.Tensor:
        """The direction Θ moves against, from Δ (may reuse Δ's memory)."""
        raise NotImplementedError


class SGD(ServerOptimizer):
    @property
    def averages(self) -> bool:
        return self.lr == 1.0

    def apply(self, theta, mean, state):
        if self.lr == 1.0:  # Θ − (Θ − mean) = mean: FedAvg's average, bit for bit
            return theta.copy_(mean)
        return super().apply(theta, mean, state)

    def step(self, delta, state):
        return delta


class Momentum(ServerOptimizer):
    def __init__(self, lr: float, momentum: float, nesterov: bool):
        super().__init__(lr)
        self.momentum, self.nesterov = momentum, nesterov

    def init(self, theta):
        import torch

        return {"velocity": torch.zeros_like(theta)}

    def step(self, delta, state):
        v = state["velocity"]
        v.mul_(self.momentum).add_(delta)
        return delta.add_(v, alpha=self.momentum) if self.nesterov else v


class Adaptive(ServerOptimizer):
    def __init__(self, lr: float, kind: str, beta1: float, beta2: float, tau: float):
        super().__init__(lr)
        self.kind, self.beta1, self.beta2, self.tau = kind, beta1, beta2, tau

    def init(self, theta):
        import torch

        return {"m": torch.zeros_like(theta), "v": torch.full_like(theta, self.tau ** 2)}

    def step(self, delta, state):
        import torch

        m, v = state["m"], state["v"]
        m.mul_(self.beta1).add_(delta, alpha=1 - self.beta1)
        square = delta.mul_(delta)  # Δ is not needed after this
        if self.kind == "adam":
            v.mul_(self.beta2).add_(square, alpha=1 - self.beta2)
        elif self.kind == "yogi":
            v.addcmul_(torch.sign(v - square), square, value=-(1 - self.beta2))
        else:
            v.add_(square)
        return m / (v.sqrt() + self.tau)
