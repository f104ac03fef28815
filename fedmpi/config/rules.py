"""The rule a config names (fed.algorithm) as the checks read it: its method in fedmpi's registry, its Options
built from fed.options, and the local momentum its paper uses."""
from __future__ import annotations

from fedmpi.algorithms.registry import method
from fedmpi.config.typed import typed_section
from fedmpi.errors import ConfigError


def algorithm_method(cfg):
    """The method fed.algorithm names, over the backbone fed.options names (algorithms/method.py)."""
    try:
        return method(cfg.fed.algorithm, cfg.fed.options)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def algorithm_options(cfg):
    """The rule's Options dataclass built from fed.options (unknown keys are errors naming their path)."""
    return typed_section(algorithm_method(cfg).Options, dict(cfg.fed.options), "fed.options")


def paper_local_momentum(cfg) -> float | None:
    """fed.local_momentum when a config leaves it empty: in the centralized and solo baselines momentum SGD
    with optim.momentum (FedFace's centralized training), otherwise the rule's paper's local optimizer."""
    if cfg.fed.setting != "federated":
        return cfg.optim.momentum
    return algorithm_method(cfg).local_momentum_default


def unread_keys(cfg) -> tuple[str, ...]:
    """Keys the run's rule does not read, whose change does not change what the run computes."""
    if cfg.fed.setting == "federated" and algorithm_method(cfg).local_momentum_default is None:
        return ("fed.local_momentum",)
    return ()
