"""The rule a validated config names, built with its options and server optimizer (kept out of the package's
__init__, which the config reads for the registry, so that the config and the rules do not import each other)."""
from fedmpi.algorithms.registry import rule
from fedmpi.algorithms.server_optim import ServerOptimizer
from fedmpi.config.fed import algorithm_options


def build_algorithm(cfg):
    """The rule a (validated) config names, with its options and server optimizer."""
    cls = rule(cfg.fed.algorithm)
    s = cfg.fed.server
    server = ServerOptimizer.build(s.resolved(cfg), s.lr, momentum=s.momentum, nesterov=s.nesterov,
                                   beta1=s.beta1, beta2=s.beta2, tau=s.tau)
    return cls.from_config(cfg, algorithm_options(cfg), server)
