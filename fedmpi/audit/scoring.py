"""Scoring reconstructions: PSNR = 10 log10(MAX² / MSE) and SSIM [Wang et al., TIP 2004] (torchmetrics' 11×11
Gaussian window, σ = 1.5), each reconstruction first assigned to an original by PSNR [Geiping et al. 2020]
(a one-to-one assignment maximising the total PSNR); and, what matters for faces, identity: a reconstruction's
embedding under an independent evaluation model against its identity's template (the mean unit embedding of
the identity's real images), accepted at the verification threshold of a stated FAR on a pair set."""
from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torchmetrics.functional.image import structural_similarity_index_measure

from fedmpi.metrics.roc import tar_at_far


def _check_images(images: torch.Tensor, name: str) -> torch.Tensor:
    if images.ndim != 4:
        raise ValueError(f"{name} must be images [N, C, H, W], got shape {tuple(images.shape)}")
    return images.detach().double()


def psnr_matrix(reconstructions: torch.Tensor, originals: torch.Tensor, data_range: float = 1.0) -> np.ndarray:
    """[R, N] PSNR (dB) of every reconstruction against every original; +inf where they are equal."""
    rec, orig = _check_images(reconstructions, "reconstructions"), _check_images(originals, "originals")
    mse = ((rec[:, None] - orig[None]) ** 2).flatten(2).mean(dim=2)
    with np.errstate(divide="ignore"):
        return (10.0 * np.log10(data_range ** 2 / mse.numpy()))


def assign_by_psnr(reconstructions: torch.Tensor, originals: torch.Tensor, data_range: float = 1.0) -> np.ndarray:
    """index[r]: the original that reconstruction r is scored against (one-to-one, maximal total PSNR)."""
    scores = np.nan_to_num(psnr_matrix(reconstructions, originals, data_range), posinf=1e9)
    rows, cols = linear_sum_assignment(-scores)
    index = np.full(len(scores), -1)
    index[rows] = cols
    return index


def psnr(reconstructions: torch.Tensor, originals: torch.Tensor, data_range: float = 1.0) -> np.ndarray:
    """[R] PSNR of each reconstruction against the same-index original."""
    rec, orig = _check_images(reconstructions, "reconstructions"), _check_images(originals, "originals")
    mse = ((rec - orig) ** 2).flatten(1).mean(dim=1).numpy()
    with np.errstate(divide="ignore"):
        return 10.0 * np.log10(data_range ** 2 / mse)


def ssim(reconstructions: torch.Tensor, originals: torch.Tensor, data_range: float = 1.0) -> np.ndarray:
    """[R] SSIM of each reconstruction against the same-index original (images at least 11 pixels a side)."""
    rec, orig = _check_images(reconstructions, "reconstructions"), _check_images(originals, "originals")
    return structural_similarity_index_measure(rec, orig, data_range=data_range, reduction="none").numpy()


def score_reconstructions(reconstructions: torch.Tensor, originals: torch.Tensor, data_range: float = 1.0) -> dict:
    """Assigned original, PSNR and SSIM per reconstruction (SSIM left out for images under 11 pixels a side)."""
    index = assign_by_psnr(reconstructions, originals, data_range)
    matched = originals[torch.as_tensor(index)]
    result = {"assigned": index, "psnr": psnr(reconstructions, matched, data_range)}
    if min(originals.shape[-2:]) >= 11:
        result["ssim"] = ssim(reconstructions, matched, data_range)
    return result


def threshold_at_far(scores, issame, far: float) -> float:
    """The verification threshold (same when cosine > it) of a pair set at a target FAR (metrics.roc)."""
    return tar_at_far(scores, issame, [far])[float(far)]["threshold"]


def as_unit(x: torch.Tensor) -> torch.Tensor:
    """Images in [-1, 1] (the data's range) -> [0, 1], the range of PSNR / SSIM and of the pictures."""
    return (x + 1) / 2


def pair_threshold(embeddings: torch.Tensor, identities, far: float) -> float:
    """The threshold at `far` on every distinct pair of `embeddings` (same when their identities match)."""
    identities = np.asarray(identities)
    rows = unit(embeddings)
    cos = (rows @ rows.T).numpy()
    upper = np.triu_indices(len(rows), 1)
    return threshold_at_far(cos[upper], (identities[:, None] == identities[None])[upper], far)


def unit(rows: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.normalize(rows.detach().double(), dim=-1)


def templates(embeddings: torch.Tensor, identities) -> dict:
    """{identity: the mean unit embedding of its images, renormalised}."""
    identities = np.asarray(identities)
    rows = unit(embeddings)
    return {ident: unit(rows[torch.as_tensor(identities == ident)].mean(dim=0)) for ident in np.unique(identities)}


def identity_recovered(embeddings: torch.Tensor, template: torch.Tensor, threshold: float) -> np.ndarray:
    """[N] bool: each embedding verifies as the template's identity (cosine > threshold)."""
    return (unit(embeddings) @ unit(template)).numpy() > threshold


def identity_recovery(reconstructed: torch.Tensor, chance: torch.Tensor, template: torch.Tensor,
                      threshold: float) -> dict:
    """Fraction of reconstructions' embeddings accepted as the true identity, and the same fraction for
    embeddings of other identities' real images (the chance rate at that threshold, ≈ the FAR)."""
    return {"recovered": float(identity_recovered(reconstructed, template, threshold).mean()),
            "chance": float(identity_recovered(chance, template, threshold).mean()),
            "threshold": float(threshold)}
