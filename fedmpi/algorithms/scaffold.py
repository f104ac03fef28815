"""SCAFFOLD (Karimireddy et al. 2020, Alg. 1, control variates of option II).

Trainer i, each local step:  y ← y − η_l (g + c − c_i)            (c: the server's, c_i: the party's own)
after the K steps:           c_i⁺ = c_i − c + (Θ − y) / (K η_l);    sends y and Δc_i = c_i⁺ − c_i; c_i ← c_i⁺
Server:                      Θ ← Θ − η_g Δ (fed.server, η_g = fed.server.lr; Δ = Θ − Σ w_i y_i)
                             c ← c + (|S|/N) Σ_i w_i Δc_i           (|S|/N = the exchange's participation)
With all parties in every round and c, c_i starting at 0, c stays the (w-weighted) mean of the c_i. The paper
averages uniformly; here the weighting w of the models weights the control variates too (with uniform w,
the paper's mean). c travels down with Θ, Δc_i up with θ_i: twice the backbone's trainable size each way.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from fedmpi.algorithms.fedavg import FedAvg


class Scaffold(FedAvg):
    name = "scaffold"
    label, colour = "SCAFFOLD", "#8c564b"     # in tables and figures (analysis/methods.py)
    up = ("control_delta",)
    down = ("control",)
    client_state = ("control",)      # c_i: the client's own, across the rounds it takes part in
    trainer_tensors, server_tensors = 1, 1
    local_momentum_default = 0.0     # option II: y <- y - eta_l (g - c_i + c), plain SGD

    def init_trainer_state(self, params):
        import torch

        return {**super().init_trainer_state(params), "control": [torch.zeros_like(p) for p in params]}

    def correct(self, params, grads, rnd, state):
        import torch

        torch._foreach_add_(grads, rnd.down["control"])       # + c
        torch._foreach_sub_(grads, state["control"])          # − c_i

    def end_round(self, params, rnd, state):
        # Δc_i = c_i⁺ − c_i = (Θ − y) / (K η_l) − c   (option II)
        import torch

        delta = rnd.up["control_delta"]
        torch._foreach_copy_(delta, rnd.global_params)
        torch._foreach_sub_(delta, params)
        torch._foreach_div_(delta, rnd.K * rnd.lr)
        torch._foreach_sub_(delta, rnd.down["control"])
        torch._foreach_add_(state["control"], delta)           # c_i ← c_i⁺

    def init_server_state(self, theta, down=None):
        import torch

        return {**self.server.init(theta), "control": down["control"] if down else torch.zeros_like(theta)}

    def server_update(self, theta, mean, state, participation=1.0):
        state["control"].add_(mean["control_delta"], alpha=participation)
        opt_state = {k: v for k, v in state.items() if k != "control"}
        return self.server.apply(theta, mean["theta"], opt_state)
