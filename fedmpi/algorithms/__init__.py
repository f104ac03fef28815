"""Federated rules as small classes with no MPI inside (see base.Algorithm)."""
from fedmpi.algorithms.base import Algorithm
from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.algorithms.fedavgm import FedAvgM
from fedmpi.algorithms.pfm import PFM


def build_algorithm(cfg) -> Algorithm:
    """The rule a config names; centralized and solo are momentum SGD on a single party (FedAvg's rule)."""
    o, f = cfg.optim, cfg.fed
    common = dict(weight_decay=o.weight_decay)
    if f.algorithm == "pfm":
        return PFM(momentum=o.momentum, K=f.K, **common)
    if f.algorithm == "fedavg":
        return FedAvg(local_momentum=f.local_momentum, **common)
    if f.algorithm == "fedavgm":
        return FedAvgM(local_momentum=f.local_momentum, server_momentum=f.server_momentum,
                       server_lr=f.server_lr, nesterov=f.nesterov, **common)
    if f.algorithm in ("centralized", "solo"):
        return FedAvg(local_momentum=o.momentum, **common)
    raise ValueError(f"fed.algorithm: unknown algorithm {f.algorithm!r}")


__all__ = ["Algorithm", "FedAvg", "FedAvgM", "PFM", "build_algorithm"]
