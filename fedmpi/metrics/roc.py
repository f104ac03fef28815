"""True accept rate at a given false accept rate, read off the empirical ROC of pair scores.

Same convention as verification.py: a pair is accepted ("same") when score > threshold.

Rule (no interpolation): the ROC is a step function; for each target FAR the operating point is the lowest
threshold whose false accept rate does not exceed the target, i.e. at most floor(FAR * n_negatives) negative
pairs score above it. That threshold is the (m+1)-th highest negative score, m = floor(FAR * n_negatives)
(-inf when m reaches n_negatives). Tied negative scores can make the achieved FAR lower than the target, never
higher. TAR is the fraction of positive pairs scoring above the threshold.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .verification import check_pairs


def tar_key(far: float) -> str:
    """Name of a TAR@FAR metric in logs and tables, e.g. 'tar@far=0.001'."""
    return f"tar@far={far:g}"


def tar_at_far(scores, issame, fars: Sequence[float] = (1e-3, 1e-2)) -> dict:
    """{far: dict(tar, far (achieved), threshold)} for each target FAR in `fars`."""
    scores, issame = check_pairs(scores, issame)
    negatives = np.sort(scores[~issame])[::-1]
    positives = scores[issame]
    if len(negatives) == 0 or len(positives) == 0:
        raise ValueError(f"TAR@FAR needs both kinds of pairs, got {len(positives)} same and {len(negatives)} "
                         "different")
    result = {}
    for far in fars:
        far = float(far)
        if not 0.0 < far <= 1.0:
            raise ValueError(f"FAR must be in (0, 1], got {far}")
        allowed = int(np.floor(far * len(negatives) * (1 + 1e-12)))  # tolerate 0.001 * 3000 = 2.9999...
        threshold = float(negatives[allowed]) if allowed < len(negatives) else -np.inf
        result[far] = {"tar": float(np.mean(positives > threshold)),
                       "far": float(np.mean(negatives > threshold)),
                       "threshold": threshold}
    return result
