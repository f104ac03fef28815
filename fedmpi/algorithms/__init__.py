"""Federated rules as small classes with no MPI inside (see base.Algorithm), listed in registry.RULES.

The registry imports without torch (the config reads it); the rules' classes and hooks are imported when first
used (`from fedmpi.algorithms import LocalRound` imports base, and with it torch)."""
from fedmpi.algorithms.registry import RULES, method_key, rule

_LAZY = {"Algorithm": "base", "LocalRound": "base", "views": "base", "ServerOptimizer": "server_optim"}


def build_algorithm(cfg):
    """The rule a (validated) config names, with its options and server optimizer."""
    from fedmpi.algorithms.server_optim import ServerOptimizer
    from fedmpi.config import algorithm_options

    cls = rule(cfg.fed.algorithm)
    s = cfg.fed.server
    server = ServerOptimizer.build(s.resolved(cfg), s.lr, momentum=s.momentum, nesterov=s.nesterov,
                                   beta1=s.beta1, beta2=s.beta2, tau=s.tau)
    return cls.from_config(cfg, algorithm_options(cfg), server)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"fedmpi.algorithms.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'fedmpi.algorithms' has no attribute {name!r}")


__all__ = ["Algorithm", "LocalRound", "RULES", "ServerOptimizer", "build_algorithm", "method_key", "rule", "views"]
