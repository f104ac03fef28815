"""True accept rate at a given false accept rate, read off the empirical ROC of pair scores. Two readings:

"insightface" (what insightface's IJB evaluation prints, the default of the IJB protocols): the ROC points of
scikit-learn's `roc_curve` (one point per distinct score, a pair accepted when score >= it, collinear points
dropped: `drop_intermediate`), then for each target FAR the point whose FPR is nearest the target (it may lie
above it); among points at that distance the last one, i.e. the highest TPR at equal FPR. No interpolation.
`roc_points` and `nearest_points` compute it in numpy (scikit-learn is not a dependency).

"strict" (the project's own reading; tar_at_far): a pair is accepted ("same") when score > threshold, as in
verification.py. The ROC is a step function; for each target FAR the operating point is the lowest
threshold whose false accept rate does not exceed the target, i.e. at most floor(FAR * n_negatives) negative
pairs score above it. That threshold is the (m+1)-th highest negative score, m = floor(FAR * n_negatives)
(-inf when m reaches n_negatives). Tied negative scores can make the achieved FAR lower than the target, never
higher. TAR is the fraction of positive pairs scoring above the threshold.

Only the m+1 highest negatives decide a threshold, so protocols with billions of negative pairs (MegaFace) keep
a running top-k and call `threshold_at_far` on it.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .verification import check_pairs

# The FARs face-recognition papers tabulate for IJB-B / IJB-C (and MegaFace's 1e-6).
PAPER_FARS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
TAR_READINGS = ("insightface", "strict")


def tar_key(far: float) -> str:
    """Name of a TAR@FAR metric in logs and tables, e.g. 'tar@far=0.001'."""
    return f"tar@far={far:g}"


def far_column(far: float) -> str:
    """Run-log column of a TAR@FAR metric: 1e-4 -> 'tar_far_1e-4' (FARs must be powers of ten)."""
    exponent = round(math.log10(far))
    if not math.isclose(far, 10.0 ** exponent, rel_tol=1e-9):
        raise ValueError(f"FAR {far} is not a power of ten")
    return f"tar_far_1e{exponent}"


def _check_far(far) -> float:
    far = float(far)
    if not 0.0 < far <= 1.0:
        raise ValueError(f"FAR must be in (0, 1], got {far}")
    return far


def allowed_false_accepts(far: float, n_negatives: int) -> int:
    """m = floor(FAR * n_negatives), tolerating float products such as 0.001 * 3000 = 2.9999..."""
    return int(np.floor(_check_far(far) * n_negatives * (1 + 1e-12)))


def threshold_at_far(top_negatives, n_negatives: int, far: float) -> float:
    """The (m+1)-th highest negative score (-inf when m >= n_negatives) from the highest negatives, sorted in
    descending order; `top_negatives` must hold at least m+1 of them."""
    m = allowed_false_accepts(far, n_negatives)
    if m >= n_negatives:
        return -np.inf
    if m >= len(top_negatives):
        raise ValueError(f"FAR {far:g} over {n_negatives} negatives needs the {m + 1} highest negative scores, "
                         f"only {len(top_negatives)} kept")
    return float(top_negatives[m])


def tar_at_far(scores, issame, fars: Sequence[float] = (1e-3, 1e-2)) -> dict:
    """{far: dict(tar, far (achieved), threshold)} for each target FAR in `fars`."""
    scores, issame = check_pairs(scores, issame)
    _require_both(issame)
    negatives = np.sort(scores[~issame])[::-1]
    positives = np.sort(scores[issame])
    return operating_points(positives, negatives, len(negatives), fars)


def roc_points(scores, issame, drop_intermediate: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fpr, tpr, thresholds) as scikit-learn's roc_curve returns them: thresholds descending from +inf, one
    per distinct score; with drop_intermediate, points on a straight line between their neighbours removed."""
    scores, issame = check_pairs(scores, issame)
    _require_both(issame)
    order = np.argsort(scores, kind="mergesort")[::-1]
    scores, issame = scores[order], issame[order]
    last_of_tie = np.r_[np.flatnonzero(np.diff(scores)), len(scores) - 1]
    tps = np.cumsum(issame, dtype=np.float64)[last_of_tie]
    fps = 1.0 + last_of_tie - tps
    thresholds = scores[last_of_tie]
    if drop_intermediate and len(fps) > 2:
        corners = np.flatnonzero(np.r_[True, np.logical_or(np.diff(fps, 2), np.diff(tps, 2)), True])
        fps, tps, thresholds = fps[corners], tps[corners], thresholds[corners]
    fps, tps, thresholds = np.r_[0.0, fps], np.r_[0.0, tps], np.r_[np.inf, thresholds]
    return fps / fps[-1], tps / tps[-1], thresholds


def nearest_points(scores, issame, fars: Sequence[float]) -> dict:
    """{far: dict(tar, far (the point's FPR), threshold (accepted when score >= it))}: insightface's reading."""
    fpr, tpr, thresholds = roc_points(scores, issame)
    result = {}
    for far in fars:
        distance = np.abs(fpr - _check_far(far))
        index = len(distance) - 1 - int(np.argmin(distance[::-1]))   # the last of the nearest
        result[float(far)] = {"tar": float(tpr[index]), "far": float(fpr[index]),
                              "threshold": float(thresholds[index])}
    return result


def read_tar(scores, issame, fars: Sequence[float], reading: str) -> dict:
    """tar_at_far ("strict") or nearest_points ("insightface")."""
    if reading == "insightface":
        return nearest_points(scores, issame, fars)
    if reading == "strict":
        return tar_at_far(scores, issame, fars)
    raise ValueError(f"unknown TAR reading {reading!r}: expected one of {', '.join(TAR_READINGS)}")


def _require_both(issame: np.ndarray) -> None:
    if issame.all() or not issame.any():
        raise ValueError(f"TAR@FAR needs both kinds of pairs, got {int(issame.sum())} same and "
                         f"{int((~issame).sum())} different")


def operating_points(positives_ascending, top_negatives, n_negatives: int, fars) -> dict:
    """tar_at_far from sorted scores: every positive (ascending) and the highest negatives (descending)."""
    result = {}
    ascending_negatives = np.asarray(top_negatives)[::-1]
    for far in fars:
        threshold = threshold_at_far(top_negatives, n_negatives, far)
        above_pos = len(positives_ascending) - np.searchsorted(positives_ascending, threshold, side="right")
        above_neg = len(ascending_negatives) - np.searchsorted(ascending_negatives, threshold, side="right")
        result[float(far)] = {"tar": float(above_pos / len(positives_ascending)),
                              "far": float(above_neg / n_negatives), "threshold": threshold}
    return result


def far_grid(n_negatives: int, points: int = 200) -> np.ndarray:
    """Log-spaced FARs from one false accept (1/n_negatives) to 1: where the ROC is drawn and saved."""
    low = max(1.0 / max(n_negatives, 1), 1e-9)
    return np.unique(np.concatenate([np.logspace(np.log10(low), 0.0, points),
                                     [f for f in PAPER_FARS if f >= low]]))


def roc_curve(scores, issame, points: int = 200) -> dict:
    """The ROC on `far_grid`: arrays far (target), achieved_far, tar, threshold (same rule as tar_at_far)."""
    scores, issame = check_pairs(scores, issame)
    n_negatives = int((~issame).sum())
    fars = far_grid(n_negatives, points)
    table = tar_at_far(scores, issame, fars)
    return {"far": fars, "achieved_far": np.array([table[f]["far"] for f in fars]),
            "tar": np.array([table[f]["tar"] for f in fars]),
            "threshold": np.array([table[f]["threshold"] for f in fars])}
