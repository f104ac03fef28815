"""FedAdam (Reddi et al. 2021, Adaptive Federated Optimization, Alg. 2): FedAvg with the adam server optimizer
on Δ = Θ − Σ_i w_i θ_i (fedmpi/algorithms/server_optim.py; fed.server.lr, beta1, beta2, tau)."""
from __future__ import annotations

from fedmpi.algorithms.fedopt import FedOpt


class FedAdam(FedOpt):
    name = "fedadam"
    label, colour = "FedAdam", "#393b79"     # in tables and figures (analysis/methods.py)
    server_optimizer = "adam"
