"""The registry of federated rules: one line per rule (name -> module:attribute, a rule class or a method.Method),
imported when asked for; `rule(name)` gives every one as a Method.

Config choices (fed.algorithm), checkpoint compatibility, the analysis tools (fedmpi/analysis/methods.py gives
each name its label and colour) and the sweeps read the names from here. The layout settings (fed.setting) are
listed here too.
"""
from __future__ import annotations

import dataclasses
import functools

from fedmpi.algorithms.method import Method
from fedmpi.errors import ConfigError
from fedmpi.listed import listed_class

RULES = {     # a rule class (the method of its own backbone) or a method.Method
    "fedavg": "fedmpi.algorithms.fedavg:FedAvg",
    "fedavgm": "fedmpi.algorithms.fedavgm:FedAvgM",
    "pfm": "fedmpi.algorithms.pfm:PFM",
    "fedprox": "fedmpi.algorithms.fedprox:FedProx",
    "scaffold": "fedmpi.algorithms.scaffold:Scaffold",
    "fedadam": "fedmpi.algorithms.fedadam:FedAdam",
    "fedyogi": "fedmpi.algorithms.fedyogi:FedYogi",
    "fedadagrad": "fedmpi.algorithms.fedadagrad:FedAdagrad",
    "mime_lite": "fedmpi.algorithms.mime_lite:MimeLite",
    "feddyn": "fedmpi.algorithms.feddyn:FedDyn",
    "fedaws": "fedmpi.algorithms.fedaws:FedAwS",
    "fedgc": "fedmpi.algorithms.fedgc:FedGC",
    "privacyface": "fedmpi.algorithms.privacyface:PrivacyFace",
    "fedfr": "fedmpi.algorithms.fedfr.rule:FedFR",
}

# The rules each reproduced paper compares, its baseline first: FedFace (FedAvg, PFM; FedFace = PFM + FV) and
# Hsu et al. (FedAvg, FedAvgM). The paper sweeps, the tools' default tables and the default config read them.
PAPERS = {"fedface": ("fedavg", "pfm"), "hsu": ("fedavg", "fedavgm")}
BASELINE = "fedavg"            # the rule of the layout baselines (centralized, solo) and of earlier configs' names
DEFAULT = PAPERS["fedface"][1]  # fed.algorithm when a config names none

# fed.setting: federated (every party its own), centralized (one party holding the union of the parties'
# data), solo (fed.solo_party alone); the last two are the paper's baselines and combine with any rule.
SINGLE_PARTY_SETTINGS = ("solo", "centralized")


@functools.lru_cache(maxsize=None)
def rule(name: str):
    """The method registered under `name` (algorithms/method.py: a rule class listed here is the method of its
    own backbone); a ValueError naming the known rules otherwise."""
    if name not in RULES:
        raise ValueError(f"fed.algorithm: unknown algorithm {name!r} (known: {', '.join(RULES)})")
    listed = listed_class(RULES[name], name)
    return listed if isinstance(listed, Method) else Method.of(listed)


def method(name: str, options) -> Method:
    """The method `name` over the backbone its options name (fed.options.backbone, in its Options object or
    fed.options' dict; the declared one where they name none). A name that cannot be the backbone: a ConfigError
    in one line naming why and the backbones that would do."""
    declared = rule(name)
    named = options.get("backbone") if isinstance(options, dict) else getattr(options, "backbone", None)
    if named is None or named == declared.backbone.name or "backbone" not in _fields(declared.Options):
        return declared
    backbone = backbone_rule(str(named), name)
    return declared.over(backbone, options_over(declared.Options, backbone.Options))


def _fields(options_class) -> set[str]:
    return {f.name for f in dataclasses.fields(options_class)} if dataclasses.is_dataclass(options_class) else set()


@functools.lru_cache(maxsize=None)
def options_over(own: type, backbone: type) -> type:
    """A method's Options over a backbone with options of its own: the method's fields, then the backbone's (FedAwS
    over FedProx: tau, ..., mu), each class validating its own; the method's own class where the backbone has none."""
    if not _fields(backbone):
        return own

    def validate(self, cfg) -> None:
        own.validate(self, cfg)
        backbone.validate(self, cfg)

    added = [(f.name, f.type, dataclasses.field(default=f.default, default_factory=f.default_factory))
             for f in dataclasses.fields(backbone)]
    return dataclasses.make_dataclass(f"{own.__name__}Over{backbone.__name__}", added, bases=(own,),
                                      namespace={"validate": validate})


def backbones() -> list[str]:
    """The registered rules a method may stand on: those without parts of their own."""
    return [name for name in RULES if not rule(name).has_parts]


def backbone_rule(name: str, method_name: str) -> type:
    """The rule class `name` as the backbone of the method `method_name`, or a ConfigError saying why not."""
    choices = f"a backbone is one of {', '.join(backbones())}"
    if name not in RULES:
        raise ConfigError(f"fed.options.backbone: {name!r} is not a registered rule; {choices}")
    found = rule(name)
    if found.has_parts:
        raise ConfigError(f"fed.options.backbone: {name} is a method with parts of its own (a class part or a local "
                          f"training), which {method_name}'s would replace; {choices}")
    shared = _fields(found.Options) & _fields(rule(method_name).Options)
    if shared:
        raise ConfigError(f"fed.options.backbone: {name}'s options ({', '.join(sorted(shared))}) have the names of "
                          f"{method_name}'s own; {choices}")
    return found.backbone


def method_key(algorithm: str, setting: str) -> str:
    """What a run is called in logs, tables and checkpoints: the rule, or the baseline setting when the rule
    is FedAvg (the paper's centralized / solo baselines), or both ('centralized pfm')."""
    if setting == "federated":
        return algorithm
    return setting if algorithm == BASELINE else f"{setting} {algorithm}"
