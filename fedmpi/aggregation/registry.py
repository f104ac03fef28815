"""The aggregators `fed.aggregation.rule` may name, one line each. `mean` is the rule's own combination (the
one mat-vec, Σ_i w_i u_i); the others look at every upload. fed.dp wraps its Gaussian mechanism around the
one named (aggregation/dp.py)."""
from __future__ import annotations

from fedmpi.aggregation.aggregators import Aggregator
from fedmpi.listed import listed_class

# name -> module:class, imported when a config names it (the rules import torch; checking a config does not)
AGGREGATORS = {
    "mean": "fedmpi.aggregation.aggregators:WeightedMean",
    "median": "fedmpi.aggregation.median:Median",
    "trimmed_mean": "fedmpi.aggregation.trimmed_mean:TrimmedMean",
    "krum": "fedmpi.aggregation.krum:Krum",
    "multikrum": "fedmpi.aggregation.krum:MultiKrum",
    "bulyan": "fedmpi.aggregation.bulyan:Bulyan",
}


def aggregator_class(name: str) -> type[Aggregator]:
    if name not in AGGREGATORS:
        raise ValueError(f"fed.aggregation.rule: {name!r} is not one of {', '.join(AGGREGATORS)}")
    return listed_class(AGGREGATORS[name], name)
