"""MIME-lite (Karimireddy et al. 2021, "Mime: Mimicking Centralized Stochastic Algorithms in Federated
Learning", Alg. 1 with momentum SGD as the base optimizer).

Trainer i, each local step:   y ← y − η_l (g + β m)        m: the server's momentum, fixed during the round
                              (g includes weight decay); the gradient of the round's first step, taken at
                              y = Θ, is the party's gradient at the server model, sent up with y
Server:                       Θ ← Θ − η_s Σ_i w_i (Θ − y_i)     (fed.server.lr; η_s = 1: Θ = Σ w_i y_i)
                              m ← β m + Σ_i w_i g_i(Θ)           (the base optimizer's state, updated only here)
m travels down with Θ. With K = 1 this is centralized momentum SGD step for step, as PFM is.

Compared with fedjax's mime_lite.py: fedjax computes each client's gradient at the server model with a
separate full pass over the client's data ("full-batch"); here it is the stochastic gradient of the round's
first local batch (a pass over a silo's data every round is out of reach, and this one costs no extra
forward/backward). fedjax weights clients by their example counts, here by the round's w (FV or fixed).
The base optimizer is fixed to momentum SGD (fedjax takes any optimizer), with PyTorch's and optax's
convention (buf ← β buf + g, no dampening); fedjax's optional client delta clipping is not offered.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from fedmpi.algorithms.base import Algorithm, add_weight_decay
from fedmpi.errors import ConfigError


@dataclass
class MimeLiteOptions:
    momentum: float = 0.9            # β of the mimicked momentum SGD

    def validate(self, cfg) -> None:
        if not 0 <= self.momentum < 1:
            raise ConfigError(f"fed.options.momentum: must be in [0, 1), got {self.momentum}")


class MimeLite(Algorithm):
    name = "mime_lite"
    label, colour = "MIME-lite", "#bcbd22"     # in tables and figures (analysis/methods.py)
    Options = MimeLiteOptions
    fixed_server_optimizer = True    # sgd: the momentum is MIME's own
    up = ("gradient",)
    down = ("momentum",)
    server_tensors = 1
    local_momentum_default = None    # the local step applies the server's momentum (fed.options.momentum)

    def init_trainer_state(self, params):
        return {}

    def local_step(self, params, grads, rnd, state):
        import torch

        add_weight_decay(grads, params, self.weight_decay)
        if rnd.step == 0:  # y = Θ: the party's gradient at the server model
            torch._foreach_copy_(rnd.up["gradient"], grads)
        torch._foreach_add_(grads, rnd.down["momentum"], alpha=self.options.momentum)
        torch._foreach_add_(params, grads, alpha=-rnd.lr)

    def init_server_state(self, theta, down=None):
        import torch

        return {"momentum": down["momentum"] if down else torch.zeros_like(theta)}

    def server_update(self, theta, mean, state, participation=1.0):
        self.server.apply(theta, mean["theta"], {})
        state["momentum"].mul_(self.options.momentum).add_(mean["gradient"])
        return theta
