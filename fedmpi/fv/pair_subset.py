"""A fixed subset of a validation set's FV-fold pairs for scoring candidates (`fv.pairs_per_set = N > 0`).

The paper scores every candidate on all the pairs of the 5 FV folds (Sec. 4.2: each fold's threshold from the
other 4, the score the mean over the 5). On a small machine that is most of a round (5 sets x T candidates x
every FV pair, each image embedded twice with its flip); a subset keeps the same score, on fewer pairs:
  - N pairs spread over the FV folds as evenly as `fold_slices` splits N (the first N % 5 folds one more), so
    the subset, in file order, is 5 contiguous folds again and the paper's rule applies to it unchanged;
  - within a fold, same-identity and different-identity pairs in the fold's own proportion (rounded), so the
    threshold search sees both kinds;
  - drawn once per set from a seeded generator (run.seed and the set's name) and kept for the whole run: every
    candidate of an iteration, and every iteration, is scored on the same pairs (Moving Norm's statistics,
    eq. 9-10, follow one quantity);
  - never a held-out pair: evaluation keeps the other 5 folds, all of them.
A set with no more than N FV pairs is scored on all of them, as with N = 0.
"""
from __future__ import annotations

import zlib

import numpy as np

from fedmpi.metrics.verification import fold_slices, kfold_accuracy, split_fv_folds

MIN_PAIRS = 10   # two pairs per FV fold: a threshold needs both kinds of pair in the folds it is chosen on


def subset_seed(seed: int, name: str) -> list[int]:
    """The generator's seed for one set: the run's seed and a stable digest of the set's name."""
    return [int(seed), zlib.crc32(name.encode())]


def fv_fold_pairs(n_pairs: int, fv_folds: str, n_folds: int) -> np.ndarray:
    """Indices of every pair of the FV folds (what the paper scores a candidate on)."""
    folds, _ = split_fv_folds(fv_folds, n_folds)
    slices = fold_slices(n_pairs, n_folds)
    return np.concatenate([np.arange(slices[f].start, slices[f].stop) for f in folds])


def fv_pair_subset(issame: np.ndarray, fv_folds: str, n_folds: int, pairs: int, seed: int, name: str) -> np.ndarray:
    """Indices (into the set's pairs, increasing) of `pairs` FV-fold pairs, chosen as the module says; all the FV
    folds' pairs when the set has no more than `pairs` of them."""
    issame = np.asarray(issame, dtype=bool)
    folds, _ = split_fv_folds(fv_folds, n_folds)
    slices = fold_slices(len(issame), n_folds)
    everything = fv_fold_pairs(len(issame), fv_folds, n_folds)
    if pairs <= 0 or pairs >= len(everything):
        return everything
    rng = np.random.default_rng(subset_seed(seed, name))
    chosen = []
    for fold, share in zip(folds, fold_slices(pairs, len(folds))):
        take = share.stop - share.start
        index = np.arange(slices[fold].start, slices[fold].stop)
        same, different = index[issame[index]], index[~issame[index]]
        n_same = int(round(take * len(same) / len(index)))
        n_same = min(max(n_same, take - len(different)), len(same))
        chosen += [rng.choice(same, n_same, replace=False), rng.choice(different, take - n_same, replace=False)]
    return np.sort(np.concatenate(chosen))


def subset_fv_accuracy(scores: np.ndarray, issame: np.ndarray, n_fv_folds: int, thresholds=None) -> float:
    """The FV score on a subset from `fv_pair_subset` (its pair scores and labels, in its order): each of its
    n_fv_folds contiguous folds scored with the threshold of the others, the mean over them."""
    return kfold_accuracy(scores, issame, n_fv_folds, thresholds=thresholds)["mean"]
