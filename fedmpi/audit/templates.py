"""Template re-identification: an uploaded class row (FedAwS / FedGC's w_c, a FedFR upload) is a face template
when its client or row is one identity. The server ranks a gallery of every identity's template under the
current model by cosine to the row; chance of a top-1 hit is 1 / gallery size. A PrivacyFace cluster (centre p,
cone cos ≥ κ) names every identity whose template falls inside its cone."""
from __future__ import annotations

import numpy as np
import torch

from .scoring import unit


def gallery_ranks(rows: torch.Tensor, gallery: torch.Tensor, owners) -> np.ndarray:
    """[R] rank (1 = best) of each row's true owner (an index into the gallery) among the gallery by cosine."""
    owners = np.asarray(owners)
    if rows.ndim != 2 or gallery.ndim != 2 or rows.shape[1] != gallery.shape[1] or len(owners) != len(rows):
        raise ValueError(f"expected rows [R, d], gallery [G, d] and R owners, got {tuple(rows.shape)}, "
                         f"{tuple(gallery.shape)} and {len(owners)} owners")
    if owners.min() < 0 or owners.max() >= len(gallery):
        raise ValueError(f"owners must index the gallery of {len(gallery)} templates, got {owners.min()}.."
                         f"{owners.max()}")
    cosines = (unit(rows) @ unit(gallery).T).numpy()
    own = cosines[np.arange(len(rows)), owners]
    return 1 + (cosines > own[:, None]).sum(axis=1)


def reidentify(rows: torch.Tensor, gallery: torch.Tensor, owners, threshold: float | None = None) -> dict:
    """top1: the fraction of rows whose owner ranks first; at_threshold: the fraction whose cosine to their
    owner exceeds a verification threshold (of a stated FAR); chance: 1 / gallery size."""
    ranks = gallery_ranks(rows, gallery, owners)
    result = {"top1": float((ranks == 1).mean()), "chance": 1.0 / len(gallery), "ranks": ranks.tolist()}
    if threshold is not None:
        own = (unit(rows) * unit(gallery)[torch.as_tensor(np.asarray(owners))]).sum(dim=1).numpy()
        result["at_threshold"] = float((own > threshold).mean())
        result["threshold"] = float(threshold)
    return result


def cone_members(centre: torch.Tensor, kappa: float, gallery: torch.Tensor) -> np.ndarray:
    """Indices of the gallery templates inside the cone cos(template, centre) ≥ κ."""
    if not -1.0 <= kappa <= 1.0:
        raise ValueError(f"a cone's κ is a cosine in [-1, 1], got {kappa}")
    return np.flatnonzero((unit(gallery) @ unit(centre)).numpy() >= kappa)
