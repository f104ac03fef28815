"""The registry of federated rules: one line per rule (name -> module:class), imported when asked for.

Config choices (fed.algorithm), checkpoint compatibility, the analysis tools (fedmpi/analysis/methods.py gives
each name its label and colour) and the sweeps read the names from here. The layout settings (fed.setting) are
listed here too.
"""
from __future__ import annotations

from fedmpi.listed import listed_class

RULES = {
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


def rule(name: str):
    """The class registered under `name`; a ValueError naming the known rules otherwise."""
    if name not in RULES:
        raise ValueError(f"fed.algorithm: unknown algorithm {name!r} (known: {', '.join(RULES)})")
    return listed_class(RULES[name], name)


def method_key(algorithm: str, setting: str) -> str:
    """What a run is called in logs, tables and checkpoints: the rule, or the baseline setting when the rule
    is FedAvg (the paper's centralized / solo baselines), or both ('centralized pfm')."""
    if setting == "federated":
        return algorithm
    return setting if algorithm == BASELINE else f"{setting} {algorithm}"
