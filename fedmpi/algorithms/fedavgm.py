"""FedAvgM (Hsu et al. 2019): FedAvg with server momentum (fed.server.momentum β, fed.server.lr η_s,
fed.server.nesterov): v ← βv + Δ;  Θ ← Θ − η_s(βv + Δ) (Nesterov) or Θ ← Θ − η_s v (heavy ball)."""
from __future__ import annotations

from fedmpi.algorithms.fedavg import FedAvg


class FedAvgM(FedAvg):
    name = "fedavgm"
    label, colour = "FedAvgM", "#9467bd"     # in tables and figures (analysis/methods.py)
    local_momentum_default = 0.0     # Hsu et al. 2019: plain SGD on the clients, the momentum on the server
    server_optimizer = "momentum"
    fixed_server_optimizer = True
    server_tensors = 1               # the server's momentum
