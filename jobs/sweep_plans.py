"""The paper's sweeps as lists of runs (FedFace, Sec. 4.3-4.4): what each run's config and overrides are.

fig4:   settings (a) K=100, (b) K=400, (c) K=1600 (3-party IR-18 ArcFace), (d) CosFace K=100, (e) IR-34 K=100,
        (f) 12-party K=100  x  methods centralized, fedavg, fedavg+fv, pfm, fedface (= pfm + FV)
table1: IR-18 ArcFace, IR-18 CosFace, IR-34 ArcFace (3-party, K=100)  x  solo per party, centralized, fedavg, pfm
fig5:   FV's score normalisation, local vs moving, for fedavg+fv and pfm+fv (IR-18, 3-party, K=100)
rules:  every rule of fedmpi's registry (fedmpi/algorithms/registry.py) without and with FV, in setting (a):
        the FL baselines (FedProx, SCAFFOLD, FedAdam, ...) next to the paper's methods
hsu:    Hsu et al.'s CIFAR-10 grid, alpha x C x E x client lr x seed, FedAvg and FedAvgM x beta (jobs/hsu_sweep.py)
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

import yaml

from fedmpi.algorithms.registry import RULES, rule
from fedmpi.analysis.methods import FEDFACE_METHODS, TABLE1_METHODS
from jobs.hsu_sweep import HsuGrid, hsu_runs
from jobs.site import ROOT

CONFIG_3PARTY = "configs/fedface_3party.yaml"
CONFIG_12PARTY = "configs/fedface_12party.yaml"

SETTINGS = {
    "a": (CONFIG_3PARTY, ["model.backbone=ir18", "model.head=arcface", "fed.K=100"]),
    "b": (CONFIG_3PARTY, ["model.backbone=ir18", "model.head=arcface", "fed.K=400"]),
    "c": (CONFIG_3PARTY, ["model.backbone=ir18", "model.head=arcface", "fed.K=1600"]),
    "d": (CONFIG_3PARTY, ["model.backbone=ir18", "model.head=cosface", "fed.K=100"]),
    "e": (CONFIG_3PARTY, ["model.backbone=ir34", "model.head=arcface", "fed.K=100"]),
    "f": (CONFIG_12PARTY, ["model.backbone=ir18", "model.head=arcface", "fed.K=100"]),
}



def method(name: str, fv: bool = False, setting: str = "federated") -> list[str]:
    """The overrides of one method: a registered rule, with or without FV, in a layout setting."""
    rule(name)  # a ValueError naming the known rules
    return [f"fed.setting={setting}", f"fed.algorithm={name}", f"fv.enabled={str(fv).lower()}"]


# the paper's methods (Fig. 4, Table 1) as overrides, by the keys of fedmpi/analysis/methods.py
METHODS = {key: method(rule_name, fv=fv, setting=setting) for key, (rule_name, setting, fv) in FEDFACE_METHODS.items()}
SOLO = method(FEDFACE_METHODS["centralized"][0], setting="solo")   # Table 1's solo runs: the baseline rule alone

TABLE1_MODELS = {"ir18-arcface": "a", "ir18-cosface": "d", "ir34-arcface": "e"}
NORMS = ("local", "moving")


@dataclass(frozen=True)
class RunSpec:
    name: str                      # unique within the sweep; also the run's log.name
    config: str                    # relative to the repository
    overrides: tuple[str, ...]
    labels: dict = field(default_factory=dict, compare=False, hash=False)


def _party_names(config: str) -> list[str]:
    return [p["name"] for p in yaml.safe_load((ROOT / config).read_text())["parties"]]


def fig4() -> list[RunSpec]:
    return [RunSpec(f"{s}-{m.replace('+', '-')}", config, tuple(base + METHODS[m]), {"setting": s, "method": m})
            for s, (config, base) in SETTINGS.items() for m in METHODS]


def table1() -> list[RunSpec]:
    runs = []
    for model, setting in TABLE1_MODELS.items():
        config, base = SETTINGS[setting]
        for party in _party_names(config):
            runs.append(RunSpec(f"{model}-solo-{party}", config,
                                tuple(base + SOLO + [f"fed.solo_party={party}"]),
                                {"model": model, "method": "solo", "party": party}))
        for m in TABLE1_METHODS:
            runs.append(RunSpec(f"{model}-{m}", config, tuple(base + METHODS[m]), {"model": model, "method": m}))
    return runs


def fig5() -> list[RunSpec]:
    config, base = SETTINGS["a"]
    return [RunSpec(f"{m.replace('+', '-')}-{norm}", config, tuple(base + METHODS[m] + [f"fv.norm={norm}"]),
                    {"method": m, "norm": norm})
            for m in ("fedavg+fv", "fedface") for norm in NORMS]


def rules() -> list[RunSpec]:
    config, base = SETTINGS["a"]
    return [RunSpec(f"{name}{'-fv' if fv else ''}", config, tuple(base + method(name, fv)),
                    {"setting": "a", "method": name + ("+fv" if fv else "")})
            for name in RULES for fv in (False, True)]


SWEEPS = {"fig4": fig4, "table1": table1, "fig5": fig5, "rules": rules, "hsu": lambda grid=None: hsu_runs(grid, RunSpec)}


def plan(name: str, only: list[str] | None = None, extra: list[str] | tuple[str, ...] = (),
         grid: HsuGrid | None = None) -> list[RunSpec]:
    """The runs of sweep `name`, those whose names match `only` (names or glob patterns) when given, each
    with the `extra` overrides appended (they win over the sweep's own). `grid` reduces the hsu sweep."""
    if name not in SWEEPS:
        raise ValueError(f"unknown sweep {name!r} (known: {', '.join(SWEEPS)})")
    if grid is not None and name != "hsu":
        raise ValueError(f"the grid flags (--alpha, --lr, ...) are for the hsu sweep, not {name}")
    runs = SWEEPS[name](grid) if name == "hsu" else SWEEPS[name]()
    if only:
        patterns = [p for item in only for p in item.split(",") if p]
        unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(r.name, p) for r in runs)]
        if unmatched:
            raise ValueError(f"--only {', '.join(unmatched)}: no run of {name} matches "
                             f"(runs: {', '.join(r.name for r in runs)})")
        runs = [r for r in runs if any(fnmatch.fnmatchcase(r.name, p) for p in patterns)]
    return [RunSpec(r.name, r.config, r.overrides + tuple(extra), r.labels) for r in runs]
