"""What FedAdam, FedYogi and FedAdagrad share (Reddi et al. 2021, Adaptive Federated Optimization, Alg. 2): FedAvg's
clients with an adaptive server optimizer on Δ = Θ − Σ_i w_i θ_i (fedmpi/algorithms/server_optim.py), which
defines the rule (fed.server.optimizer may not name another one)."""
from __future__ import annotations

from fedmpi.algorithms.fedavg import FedAvg


class FedOpt(FedAvg):
    local_momentum_default = 0.0     # Reddi et al. 2021 (FedOpt): the clients' optimizer is plain SGD
    fixed_server_optimizer = True
    server_tensors = 2               # the server optimizer's moments
