"""FedAdagrad (Reddi et al. 2021, Adaptive Federated Optimization, Alg. 2): FedAvg with the adagrad server optimizer
on Δ = Θ − Σ_i w_i θ_i (fedmpi/algorithms/server_optim.py; fed.server.lr, beta1, tau)."""
from __future__ import annotations

from fedmpi.algorithms.fedopt import FedOpt


class FedAdagrad(FedOpt):
    name = "fedadagrad"
    label, colour = "FedAdagrad", "#843c39"     # in tables and figures (analysis/methods.py)
    server_optimizer = "adagrad"
