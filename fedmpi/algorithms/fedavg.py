"""FedAvg (McMahan et al. 2017): K steps of local (momentum) SGD, then Θ = Σ_i w_i θ_i — or, with another
server optimizer (fed.server), a server step on Δ = Θ − Σ_i w_i θ_i (fedjax's fed_avg)."""
from __future__ import annotations

from fedmpi.algorithms.base import Algorithm


class FedAvg(Algorithm):
    name = "fedavg"
    label, colour = "FedAvg", "#1f77b4"     # in tables and figures (analysis/methods.py)
    local_momentum_default = 0.0     # plain SGD on the clients (McMahan et al. 2017; Hsu et al. 2019's Alg.)
