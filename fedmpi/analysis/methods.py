"""Method names, order and colours for tables and figures, for the names of fedmpi's registry of rules and
settings (fedmpi/algorithms/registry.py): a run's method is its rule's label (or its baseline setting's), +FV
when it ran Federated Validation, marked ' moving-norm' when FV used the Moving Norm."""
from __future__ import annotations

from fedmpi.algorithms.registry import PAPERS, RULES, SINGLE_PARTY_SETTINGS, method_key, rule

FV_SUFFIX = "+FV"
UNKNOWN_COLOR = "#7f7f7f"
# (label, colour) of every registered rule (what it declares) and baseline setting
LABELS = {
    **{name: (rule(name).label, rule(name).colour) for name in RULES},
    "centralized": ("Centralized", "#000000"),
    "solo": ("Solo", UNKNOWN_COLOR),
}


def method_label(key: str) -> tuple[str, str]:
    """(label, colour) of a method key (fedmpi.algorithms.registry.method_key: 'pfm', 'solo', 'centralized pfm');
    an unknown key is its own label."""
    if key in LABELS:
        return LABELS[key]
    setting, _, algorithm = key.partition(" ")
    if setting in SINGLE_PARTY_SETTINGS and algorithm in LABELS:
        return f"{LABELS[setting][0]} {LABELS[algorithm][0]}", LABELS[setting][1]
    return key, UNKNOWN_COLOR

# FedFace's methods (Bai et al. 2021) by the keys its sweeps and study use: (rule, layout setting, FV). The rules
# are the registry's (PAPERS: the baseline rule, then the paper's own); FedFace is the paper's rule with FV.
_BASELINE_RULE, _OWN_RULE = PAPERS["fedface"]
FEDFACE_METHODS = {
    "centralized": (_BASELINE_RULE, "centralized", False),
    "fedavg": (_BASELINE_RULE, "federated", False),
    "fedavg+fv": (_BASELINE_RULE, "federated", True),
    "pfm": (_OWN_RULE, "federated", False),
    "fedface": (_OWN_RULE, "federated", True),
}
# Table 1's columns (the paper's; solo per party beside them), and the study's Table 1 with FedFace added
TABLE1_METHODS = ("centralized", "fedavg", "pfm")
TABLE1_STUDY_METHODS = (*TABLE1_METHODS, "fedface")


def fedface_label(key: str) -> str:
    """The label a FedFace method's runs carry in tables and figures (the registry's, +FV with FV)."""
    rule, setting, fv = FEDFACE_METHODS[key]
    label = method_label(method_key(rule, setting))[0]
    return label + FV_SUFFIX if fv else label


def method_order() -> list[str]:
    """Baselines first, then the rules in registry order, each without and with FV."""
    order = [method_label(s)[0] for s in SINGLE_PARTY_SETTINGS]
    for name in RULES:
        label = method_label(name)[0]
        order += [label, label + FV_SUFFIX]
    return order


def method_color(method: str) -> str:
    """A method's colour: the registry's; with FV a darker shade; with the Moving Norm a lighter one."""
    base, _, variant = method.partition(" ")
    plain = base.removesuffix(FV_SUFFIX)
    key = {method_label(k)[0]: k for k in (*SINGLE_PARTY_SETTINGS, *RULES)}.get(plain, plain)
    color = method_label(key)[1]
    if base.endswith(FV_SUFFIX):
        color = _shade(color, 0.6)
    return _shade(color, 1.6) if variant else color


def _shade(color: str, factor: float) -> str:
    rgb = [int(color[i:i + 2], 16) for i in (1, 3, 5)]
    rgb = [round(c * factor) if factor < 1 else round(c + (255 - c) * (factor - 1)) for c in rgb]
    return "#" + "".join(f"{min(255, max(0, c)):02x}" for c in rgb)


def method_sort_key(method: str) -> tuple:
    order = method_order()
    base = method.split(" ")[0]
    return (order.index(base) if base in order else len(order), method)


def method_legend(method: str) -> str:
    """The paper's name for its own method: FedFace is PFM with FV."""
    fedface = method_label(PAPERS["fedface"][1])[0] + FV_SUFFIX
    return f"{fedface} (FedFace)" if method == fedface else method
