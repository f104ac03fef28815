"""Federated rules as small classes with no MPI inside (see base.Algorithm), listed in registry.RULES."""
from fedmpi.algorithms.base import Algorithm, LocalRound, views
from fedmpi.algorithms.registry import RULES, method_key, rule
from fedmpi.algorithms.server_optim import ServerOptimizer


def build_algorithm(cfg) -> Algorithm:
    """The rule a (validated) config names, with its options and server optimizer."""
    from fedmpi.config import algorithm_options

    cls = rule(cfg.fed.algorithm)
    s = cfg.fed.server
    server = ServerOptimizer.build(s.resolved(cfg), s.lr, momentum=s.momentum, nesterov=s.nesterov,
                                   beta1=s.beta1, beta2=s.beta2, tau=s.tau)
    return cls.from_config(cfg, algorithm_options(cfg), server)


__all__ = ["Algorithm", "LocalRound", "RULES", "ServerOptimizer", "build_algorithm", "method_key", "rule", "views"]
