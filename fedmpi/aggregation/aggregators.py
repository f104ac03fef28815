"""How a round's uploads become the vector the rule's server step takes (the aggregation seam).

An aggregator is called as `aggregator(uploads, w, out)` and writes into `out` [D_up]; `uploads` is the round's
exchange after its `wait()`:
  uploads.weighted_mean(w, out)   Σ_i w_i u_i by the exchange's own path (the silo's one mat-vec over the
                                  gathered rows; the cross-device exchange's reduction, whose weights are the
                                  clients' example counts)
  uploads.rows                    [P, D_up], every upload of the round (party by party): only for an
                                  aggregator with `needs_uploads = True`, and only from an exchange that keeps
                                  them (`gives_uploads`; the cross-device exchange sums them on the wire)
w is the round's weighting (FV's or the fixed one: float64, on the simplex), on the host or on the uploads' device:
an aggregator moves it to the rows' device before it meets them. An upload is [θ_i | up payloads],
so an aggregator that looks at each upload sees the rule's payloads too. The default is `WeightedMean`; a rule
names another with `Algorithm.aggregator`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch


@dataclass
class NoOptions:
    """An aggregator without options of its own."""

    def validate(self, uploads: int, fail) -> None:
        pass


class Aggregator:
    name: ClassVar[str] = "base"
    label: ClassVar[str] = "Base"
    needs_uploads: ClassVar[bool] = False   # True: reads uploads.rows (every upload), not only the weighted mean
    # True: bounds every update's norm itself (DP's clip): the upload check then applies no ratio rule and counts
    # an excluded upload as a zero update at its weight (aggregation/upload_check.py)
    clips_uploads: ClassVar[bool] = False
    Options: ClassVar[type] = NoOptions     # its fed.aggregation options besides `rule`

    def __init__(self, options=None):
        self.options = options if options is not None else self.Options()

    def starts_from(self, reference: torch.Tensor) -> None:
        """The global payload [Θ | down payloads] each round's uploads started from (the server's, updated in
        place every round): an aggregator that measures updates from it (DP's clipping) keeps it."""

    def state_dict(self) -> dict:
        """What a checkpoint must keep for a resumed run to aggregate bitwise as an uninterrupted one."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def __call__(self, uploads, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class WeightedMean(Aggregator):
    """Σ_i w_i u_i (FedFace eq. 4, FedAvg): the exchange's one mat-vec, no allocation."""
    name, label = "mean", "Weighted mean"

    def __call__(self, uploads, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return uploads.weighted_mean(w, out)


def check_exchange(aggregator: Aggregator, exchange, rule: str) -> None:
    """A one-line error when the aggregator needs every upload and the exchange does not keep them."""
    if aggregator.needs_uploads and not exchange.gives_uploads:
        raise ValueError(f"fed.algorithm={rule}: its aggregator ({type(aggregator).__name__}) needs every "
                         f"upload, which {type(exchange).__name__} does not keep (it sums them on the way)")
