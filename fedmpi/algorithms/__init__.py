"""Federated rules as small classes with no MPI inside (see base.Algorithm), listed in registry.RULES.

The registry imports without torch (the config reads it); the rules' classes and hooks are imported when first
used (`from fedmpi.algorithms import LocalRound` imports base, and with it torch)."""
from fedmpi.algorithms.registry import RULES, method_key, rule

_LAZY = {"Algorithm": "base", "LocalRound": "base", "views": "base", "ServerOptimizer": "server_optim"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"fedmpi.algorithms.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'fedmpi.algorithms' has no attribute {name!r}")


__all__ = ["Algorithm", "LocalRound", "RULES", "ServerOptimizer", "method_key", "rule", "views"]
