"""Krum and Multi-Krum (Blanchard et al. 2017): each upload is scored by the summed squared distances to its
n − f − 2 nearest other uploads; Krum takes the upload of lowest score, Multi-Krum the w-weighted mean of the m
lowest (w renormalised over them, as Flower's MultiKrum weights by examples). Ties go to the lower party index.
Krum's guarantee needs n > 2f + 2 uploads."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from fedmpi.aggregation.aggregators import Aggregator
from fedmpi.aggregation.columns import centred_products


def squared_distances(rows: torch.Tensor) -> torch.Tensor:
    """[P, P] squared Euclidean distances in float64, from the Gram matrix of the rows minus their mean (the
    centring keeps near-equal models from cancelling), a block of columns at a time. Exactly symmetric (the Gram
    matrix is): Krum's score ties (a mutually nearest pair with n − f − 2 = 1) stay ties, broken by party index."""
    gram = centred_products(rows)[0]
    sq = gram.diagonal()
    return (sq[:, None] + sq[None, :] - 2 * gram).clamp_(min=0).fill_diagonal_(0)


def krum_scores(distances: torch.Tensor, f: int) -> torch.Tensor:
    """Each upload's score: the sum of its n − f − 2 smallest squared distances to the others."""
    n = distances.shape[0]
    others = distances + torch.diag(torch.full((n,), float("inf"), dtype=distances.dtype, device=distances.device))
    return others.sort(dim=1).values[:, :n - f - 2].sum(dim=1)


def lowest(scores: torch.Tensor, m: int) -> torch.Tensor:
    """Indices of the m lowest scores, ties to the lower index."""
    return torch.argsort(scores, stable=True)[:m]


def require_krum(name: str, uploads: int, f: int, fail) -> None:
    if f < 0:
        fail("fed.aggregation.f", f"must be >= 0, got {f}")
    if not uploads > 2 * f + 2:
        fail("fed.aggregation.f", f"{name} needs n > 2f + 2 uploads: n = {uploads}, f = {f} "
                                  f"(at most f = {max((uploads - 3) // 2, 0)} with {uploads} uploads)")


@dataclass
class KrumOptions:
    f: int = 1             # Byzantine uploads tolerated

    def validate(self, uploads: int, fail) -> None:
        require_krum("krum", uploads, self.f, fail)


@dataclass
class MultiKrumOptions:
    f: int = 1
    m: int = 0             # uploads averaged; 0: n − f

    def validate(self, uploads: int, fail) -> None:
        require_krum("multikrum", uploads, self.f, fail)
        if not 0 <= self.m <= uploads:
            fail("fed.aggregation.m", f"must be in [0, {uploads}] (0: n - f), got {self.m}")


class Krum(Aggregator):
    name = "krum"
    label = "Krum"
    needs_uploads = True
    Options = KrumOptions

    def selected(self, rows: torch.Tensor) -> torch.Tensor:
        return lowest(krum_scores(squared_distances(rows), self.options.f), 1)

    def __call__(self, uploads, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return out.copy_(uploads.rows[int(self.selected(uploads.rows)[0])])


class MultiKrum(Krum):
    name = "multikrum"
    label = "Multi-Krum"
    Options = MultiKrumOptions

    def selected(self, rows: torch.Tensor) -> torch.Tensor:
        m = self.options.m or rows.shape[0] - self.options.f
        return lowest(krum_scores(squared_distances(rows), self.options.f), m)

    def __call__(self, uploads, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        chosen = self.selected(uploads.rows)
        rows = uploads.rows
        weights = torch.zeros(rows.shape[0], dtype=torch.float64, device=rows.device)
        weights[chosen] = w.to(device=rows.device, dtype=torch.float64)[chosen]
        if not weights.sum() > 0:
            weights[chosen] = 1.0
        return torch.mv(rows.t(), (weights / weights.sum()).to(rows.dtype), out=out)
