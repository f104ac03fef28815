"""Pair-verification accuracy as LFW-style protocols compute it (10 contiguous folds, threshold from other folds).

Conventions used throughout fedmpi:
- a score is the cosine similarity of the two (L2-normalised) embeddings of a pair: higher means "same";
- a pair is predicted "same" when score > threshold (strict), like insightface's `dist < threshold` on squared
  distance, dist = 2 - 2 * cosine;
- accuracies are fractions in [0, 1].

The threshold search (`best_threshold`) sorts the scores once and reads the accuracy of every possible cut from
cumulative counts. Each cut lies between two consecutive distinct scores and is reported as their midpoint
(-inf: accept every pair, +inf: reject every pair). Among cuts of equal accuracy the highest threshold wins (the
fewest accepted pairs): that is what insightface's `np.argmax` over its ascending distance grid picks, and what
the loop reference `grid_threshold` does. Passing `thresholds=` restricts the search to that grid (still
vectorised, same answer as the loop over it).
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

# insightface's grid, np.arange(0, 4, 0.01) on squared distance, as cosine thresholds (descending).
INSIGHTFACE_COSINE_GRID = 1.0 - np.arange(0.0, 4.0, 0.01) / 2.0

FV_FOLD_CHOICES = ("first", "second")


def check_pairs(scores, issame) -> tuple[np.ndarray, np.ndarray]:
    """Return (scores float64 [N], issame bool [N]) or raise a one-line ValueError naming the problem."""
    scores = np.asarray(scores, dtype=np.float64)
    issame = np.asarray(issame)
    if scores.ndim != 1 or issame.ndim != 1:
        raise ValueError(f"scores and issame must be 1-D, got shapes {scores.shape} and {issame.shape}")
    if len(scores) != len(issame):
        raise ValueError(f"scores has {len(scores)} pairs but issame has {len(issame)}")
    if issame.dtype != np.bool_:
        if issame.dtype.kind not in "iu" or not np.isin(issame, (0, 1)).all():
            raise ValueError(f"issame must be boolean (or 0/1 integers), got dtype {issame.dtype}")
        issame = issame.astype(bool)
    if not np.isfinite(scores).all():
        raise ValueError("scores contain NaN or infinite values")
    return scores, issame


def fold_slices(n_pairs: int, n_folds: int = 10) -> list[slice]:
    """Contiguous folds in file order; the first n_pairs % n_folds folds hold one pair more (sklearn KFold)."""
    if n_folds < 2:
        raise ValueError(f"n_folds must be at least 2, got {n_folds}")
    if n_pairs < n_folds:
        raise ValueError(f"cannot split {n_pairs} pairs into {n_folds} folds")
    base, extra = divmod(n_pairs, n_folds)
    slices, start = [], 0
    for fold in range(n_folds):
        stop = start + base + (1 if fold < extra else 0)
        slices.append(slice(start, stop))
        start = stop
    return slices


def accuracy_at(scores, issame, threshold: float) -> float:
    """Fraction of pairs classified correctly when 'same' means score > threshold."""
    scores, issame = check_pairs(scores, issame)
    if len(scores) == 0:
        raise ValueError("accuracy of an empty set of pairs is undefined")
    return float(np.mean((scores > threshold) == issame))


def _cut_accuracies(sorted_issame: np.ndarray, rejected: np.ndarray) -> np.ndarray:
    """Accuracy when the `rejected` lowest-scored pairs are predicted different and the rest same."""
    same_below = np.concatenate(([0], np.cumsum(sorted_issame)))[rejected]
    total_same = int(sorted_issame.sum())
    # correct = (rejected - same_below) true rejects + (total_same - same_below) true accepts
    return (rejected - 2 * same_below + total_same) / len(sorted_issame)


def best_threshold(scores, issame, thresholds=None) -> tuple[float, float]:
    """(threshold, accuracy) maximising accuracy on these pairs; see the module docstring for cuts and ties."""
    scores, issame = check_pairs(scores, issame)
    order = np.argsort(scores, kind="stable")
    return _best_on_sorted(scores[order], issame[order], thresholds)


def _best_on_sorted(sorted_scores: np.ndarray, sorted_issame: np.ndarray, thresholds) -> tuple[float, float]:
    n = len(sorted_scores)
    if n == 0:
        raise ValueError("cannot choose a threshold on an empty set of pairs")
    if thresholds is None:
        # valid cuts: before the first pair, between distinct scores, after the last pair
        boundaries = np.flatnonzero(sorted_scores[1:] > sorted_scores[:-1]) + 1
        rejected = np.concatenate(([0], boundaries, [n]))
        lo, hi = sorted_scores[boundaries - 1], sorted_scores[boundaries]
        mid = lo + (hi - lo) / 2.0
        mid = np.where(mid < hi, mid, lo)  # adjacent floats: lo still separates them under score > threshold
        values = np.concatenate(([-np.inf], mid, [np.inf]))
    else:
        values = np.asarray(thresholds, dtype=np.float64)
        if values.ndim != 1 or len(values) == 0 or not np.isfinite(values).all():
            raise ValueError("thresholds must be a non-empty 1-D array of finite numbers")
        values = np.sort(values)
        rejected = np.searchsorted(sorted_scores, values, side="right")
    accuracies = _cut_accuracies(sorted_issame, rejected)
    best = len(accuracies) - 1 - int(np.argmax(accuracies[::-1]))  # highest threshold among the best
    return float(values[best]), float(accuracies[best])


def grid_threshold(scores, issame, thresholds=INSIGHTFACE_COSINE_GRID) -> tuple[float, float]:
    """Reference for tests and benchmarks: try each threshold in a loop (highest first, first best kept)."""
    scores, issame = check_pairs(scores, issame)
    best_value, best_accuracy = None, -1.0
    for value in np.sort(np.asarray(thresholds, dtype=np.float64))[::-1]:
        accuracy = float(np.mean((scores > value) == issame))
        if accuracy > best_accuracy:
            best_value, best_accuracy = float(value), accuracy
    return best_value, best_accuracy


def _fold_list(folds: Iterable[int] | None, n_folds: int, what: str) -> list[int]:
    if folds is None:
        return list(range(n_folds))
    folds = [int(f) for f in folds]
    bad = [f for f in folds if not 0 <= f < n_folds]
    if bad:
        raise ValueError(f"{what} {bad} out of range for {n_folds} folds")
    if len(set(folds)) != len(folds):
        raise ValueError(f"{what} contain duplicates: {folds}")
    return folds


def kfold_accuracy(scores, issame, n_folds: int = 10, eval_folds: Sequence[int] | None = None,
                   threshold_folds: Sequence[int] | None = None, thresholds=None) -> dict:
    """Held-out accuracy per evaluated fold, its threshold chosen on `threshold_folds` minus that fold.

    Returns dict(mean, std (population, as insightface), per_fold, thresholds, folds).
    """
    scores, issame = check_pairs(scores, issame)
    slices = fold_slices(len(scores), n_folds)
    eval_folds = _fold_list(eval_folds, n_folds, "eval_folds")
    threshold_folds = _fold_list(threshold_folds, n_folds, "threshold_folds")
    if not eval_folds:
        raise ValueError("eval_folds is empty")
    fold_of = np.repeat(np.arange(n_folds), [s.stop - s.start for s in slices])
    order = np.argsort(scores, kind="stable")  # sorted once; each training set is a mask of this order
    sorted_scores, sorted_issame, sorted_fold = scores[order], issame[order], fold_of[order]
    per_fold, chosen = [], []
    for fold in eval_folds:
        train = [f for f in threshold_folds if f != fold]
        if not train:
            raise ValueError(f"no folds left to choose the threshold of fold {fold}")
        in_train = np.zeros(n_folds, bool)
        in_train[train] = True
        in_train = in_train[sorted_fold]
        threshold, _ = _best_on_sorted(sorted_scores[in_train], sorted_issame[in_train], thresholds)
        held = slices[fold]
        per_fold.append(float(np.mean((scores[held] > threshold) == issame[held])))
        chosen.append(threshold)
    per_fold = np.array(per_fold)
    return {"mean": float(per_fold.mean()), "std": float(per_fold.std()), "per_fold": per_fold,
            "thresholds": np.array(chosen), "folds": list(eval_folds)}


def split_fv_folds(fv_folds: str = "first", n_folds: int = 10) -> tuple[list[int], list[int]]:
    """(FV folds, held-out folds): the first half of the folds for FV and the rest for evaluation, or vice versa."""
    if fv_folds not in FV_FOLD_CHOICES:
        raise ValueError(f"fv_folds must be one of {FV_FOLD_CHOICES}, got {fv_folds!r}")
    if n_folds < 4 or n_folds % 2:
        raise ValueError(f"the FV split needs an even number of folds >= 4, got {n_folds}")
    first, second = list(range(n_folds // 2)), list(range(n_folds // 2, n_folds))
    return (first, second) if fv_folds == "first" else (second, first)


def fv_accuracy(scores, issame, fv_folds: str = "first", n_folds: int = 10, thresholds=None) -> dict:
    """FV score (Sec. 4.2): each FV fold's threshold comes from the remaining FV folds (4 of 5); mean accuracy."""
    fv, _ = split_fv_folds(fv_folds, n_folds)
    return kfold_accuracy(scores, issame, n_folds, eval_folds=fv, threshold_folds=fv, thresholds=thresholds)


def heldout_accuracy(scores, issame, fv_folds: str = "first", n_folds: int = 10, thresholds=None) -> dict:
    """Evaluation on the folds FV does not see; each fold's threshold comes from all 9 other folds."""
    _, held = split_fv_folds(fv_folds, n_folds)
    return kfold_accuracy(scores, issame, n_folds, eval_folds=held, thresholds=thresholds)
