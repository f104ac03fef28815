"""The aggregators `fed.aggregation.rule` may name, one line each. `mean` is the rule's own combination (the
one mat-vec, Σ_i w_i u_i); the others look at every upload. fed.dp replaces the mean by its Gaussian mechanism."""
from __future__ import annotations

from fedmpi.aggregation.aggregators import Aggregator, WeightedMean
from fedmpi.aggregation.bulyan import Bulyan
from fedmpi.aggregation.krum import Krum, MultiKrum
from fedmpi.aggregation.median import Median
from fedmpi.aggregation.trimmed_mean import TrimmedMean

AGGREGATORS: dict[str, type[Aggregator]] = {cls.name: cls for cls in (
    WeightedMean,
    Median,
    TrimmedMean,
    Krum,
    MultiKrum,
    Bulyan,
)}


def aggregator_class(name: str) -> type[Aggregator]:
    try:
        return AGGREGATORS[name]
    except KeyError:
        raise ValueError(f"fed.aggregation.rule: {name!r} is not one of {', '.join(AGGREGATORS)}") from None
