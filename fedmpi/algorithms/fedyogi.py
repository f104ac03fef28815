"""FedYogi (Reddi et al. 2021, Adaptive Federated Optimization, Alg. 2): FedAvg with the yogi server optimizer
on Δ = Θ − Σ_i w_i θ_i (fedmpi/algorithms/server_optim.py; fed.server.lr, beta1, beta2, tau)."""
from __future__ import annotations

from fedmpi.algorithms.fedopt import FedOpt


class FedYogi(FedOpt):
    name = "fedyogi"
    label, colour = "FedYogi", "#637939"     # in tables and figures (analysis/methods.py)
    server_optimizer = "yogi"
