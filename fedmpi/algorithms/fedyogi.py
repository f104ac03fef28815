"""FedYogi (Reddi et al. 2021, Adaptive Federated Optimization, Alg. 2): FedAvg with the yogi server optimizer
on Δ = Θ − Σ_i w_i θ_i (fedmpi/algorithms/server_optim.py; fed.server.lr, beta1, beta2, tau)."""
from __future__ import annotations

from fedmpi.algorithms.fedavg import FedAvg


class FedYogi(FedAvg):
    name = "fedyogi"
    label, colour = "FedYogi", "#637939"     # in tables and figures (analysis/methods.py)
    server_optimizer = "yogi"
    local_momentum_default = 0.0     # Reddi et al. 2021 (FedOpt): the clients' optimizer is plain SGD
    fixed_server_optimizer = True
    server_tensors = 2               # the server optimizer's moments
