import math

import numpy as np
import pytest

from fedmpi.metrics.embed import pair_scores
from fedmpi.metrics.roc import tar_at_far, tar_key
from fedmpi.metrics.verification import (INSIGHTFACE_COSINE_GRID, accuracy_at, best_threshold, fold_slices,
                                         fv_accuracy, grid_threshold, heldout_accuracy, kfold_accuracy,
                                         split_fv_folds)


def lfw_layout(n_folds=10, per_fold=600):
    """issame as LFW's pairs.txt lays it out: each fold is half matched pairs, then half mismatched."""
    fold = np.r_[np.ones(per_fold // 2, bool), np.zeros(per_fold // 2, bool)]
    return np.tile(fold, n_folds)


def unit(angle_deg):
    a = math.radians(angle_deg)
    return [math.cos(a), math.sin(a)]


# ---------------------------------------------------------------- folds

def test_fold_slices_are_contiguous_like_lfw():
    slices = fold_slices(6000)
    assert [(s.start, s.stop) for s in slices] == [(600 * i, 600 * (i + 1)) for i in range(10)]


def test_fold_slices_uneven_gives_the_first_folds_one_more():
    assert [s.stop - s.start for s in fold_slices(13, 10)] == [2, 2, 2] + [1] * 7
    assert fold_slices(13, 10)[-1].stop == 13


def test_fold_slices_rejects_too_few_pairs():
    with pytest.raises(ValueError, match="cannot split 5 pairs into 10 folds"):
        fold_slices(5)


def test_split_fv_folds():
    assert split_fv_folds("first") == ([0, 1, 2, 3, 4], [5, 6, 7, 8, 9])
    assert split_fv_folds("second") == ([5, 6, 7, 8, 9], [0, 1, 2, 3, 4])
    with pytest.raises(ValueError, match="fv_folds must be one of"):
        split_fv_folds("last")


# ---------------------------------------------------------------- threshold search

def test_best_threshold_separable_is_midpoint():
    threshold, accuracy = best_threshold([0.1, 0.4, 0.35, 0.8], [False, True, False, True])
    assert threshold == pytest.approx(0.375)
    assert accuracy == 1.0


def test_best_threshold_ties_go_to_the_highest_threshold():
    # cuts: accept all 1/3, reject 0.2 -> 2/3, reject 0.2,0.5 -> 1/3, reject all -> 2/3
    threshold, accuracy = best_threshold([0.2, 0.5, 0.8], [False, True, False])
    assert threshold == math.inf
    assert accuracy == pytest.approx(2 / 3)


def test_best_threshold_never_cuts_between_equal_scores():
    # the two 0.5 pairs must fall on the same side; best: reject both (2/3) at the highest threshold 0.7
    threshold, accuracy = best_threshold([0.5, 0.5, 0.9], [True, False, True])
    assert threshold == pytest.approx(0.7)
    assert accuracy == pytest.approx(2 / 3)


def test_best_threshold_adjacent_floats_still_separate():
    lo = 0.3
    hi = np.nextafter(lo, 1.0)
    threshold, accuracy = best_threshold([lo, hi], [False, True])
    assert accuracy == 1.0
    assert accuracy_at([lo, hi], [False, True], threshold) == 1.0


@pytest.mark.parametrize("seed", range(5))
def test_vectorized_equals_loop_over_every_cut(seed):
    rng = np.random.default_rng(seed)
    n = 400
    issame = rng.random(n) < 0.5
    scores = np.round(rng.normal(0.3 * issame, 0.3), 2)  # rounding makes many ties
    threshold, accuracy = best_threshold(scores, issame)
    distinct = np.unique(scores)
    cuts = np.concatenate(([-np.inf], (distinct[1:] + distinct[:-1]) / 2, [np.inf]))
    ref_threshold, ref_accuracy = grid_threshold(scores, issame, cuts[np.isfinite(cuts)].tolist() + [-1e9, 1e9])
    assert accuracy == ref_accuracy
    # same cut: both thresholds classify every pair identically
    assert np.array_equal(scores > threshold, scores > ref_threshold)


@pytest.mark.parametrize("seed", range(5))
def test_vectorized_on_the_insightface_grid_equals_the_grid_loop(seed):
    rng = np.random.default_rng(100 + seed)
    n = 600
    issame = rng.random(n) < 0.5
    scores = np.clip(rng.normal(0.25 * issame, 0.3), -1, 1)
    assert best_threshold(scores, issame, INSIGHTFACE_COSINE_GRID) == grid_threshold(scores, issame)


def test_every_cut_is_at_least_as_good_as_the_grid_and_equal_when_the_grid_resolves_every_cut():
    rng = np.random.default_rng(7)
    issame = rng.random(1000) < 0.5
    scores = np.clip(rng.normal(0.2 * issame, 0.3), -1, 1)
    assert best_threshold(scores, issame)[1] >= grid_threshold(scores, issame)[1]
    # scores on a 0.01 cosine lattice offset from the grid: every cut has a grid point inside it
    lattice = np.round(scores, 2) + 0.0025
    assert best_threshold(lattice, issame)[1] == grid_threshold(lattice, issame)[1]


@pytest.mark.parametrize("seed", range(3))
def test_kfold_on_a_grid_equals_the_insightface_loop(seed):
    rng = np.random.default_rng(200 + seed)
    issame = lfw_layout(10, 60)
    scores = np.clip(rng.normal(0.3 * issame, 0.3), -1, 1)
    result = kfold_accuracy(scores, issame, thresholds=INSIGHTFACE_COSINE_GRID)
    expected = []
    for fold in range(10):
        test = np.zeros(600, bool)
        test[60 * fold:60 * (fold + 1)] = True
        threshold, _ = grid_threshold(scores[~test], issame[~test])
        expected.append(np.mean((scores[test] > threshold) == issame[test]))
    assert result["per_fold"].tolist() == expected
    assert result["mean"] == np.mean(expected)


# ---------------------------------------------------------------- k-fold accuracy

def hand_made_embeddings():
    """10 folds of 2 pairs: a matched pair at 0 degrees and a mismatched pair at 90 degrees, except that the
    matched pair of fold 3 is 120 degrees apart (cosine -0.5), which no threshold can accept."""
    rows = []
    for fold in range(10):
        rows += [unit(10 * fold), unit(10 * fold + (120 if fold == 3 else 0))]  # matched
        rows += [unit(10 * fold), unit(10 * fold + 90)]  # mismatched
    return np.array(rows), np.tile([True, False], 10)


def test_kfold_exact_accuracy_on_hand_made_embeddings():
    embeddings, issame = hand_made_embeddings()
    scores = pair_scores(embeddings)
    result = kfold_accuracy(scores, issame)
    # fold 3: threshold 0.5 from the others rejects its matched pair; every other fold is classified right
    assert result["per_fold"] == pytest.approx([1, 1, 1, 0.5, 1, 1, 1, 1, 1, 1])
    assert result["mean"] == pytest.approx(0.95)
    assert result["std"] == pytest.approx(0.15)
    assert result["thresholds"] == pytest.approx([0.5] * 10)
    assert result["folds"] == list(range(10))


def test_perfect_embeddings_give_100_percent():
    rng = np.random.default_rng(0)
    issame = lfw_layout()
    scores = np.where(issame, rng.uniform(0.4, 1.0, 6000), rng.uniform(-0.2, 0.3, 6000))
    assert kfold_accuracy(scores, issame)["mean"] == 1.0
    assert fv_accuracy(scores, issame)["mean"] == 1.0
    assert heldout_accuracy(scores, issame, "second")["mean"] == 1.0


def test_random_embeddings_give_about_50_percent():
    rng = np.random.default_rng(1)
    embeddings = rng.normal(size=(12000, 64))
    result = kfold_accuracy(pair_scores(embeddings), lfw_layout())
    assert abs(result["mean"] - 0.5) < 0.03


def fv_case():
    """Folds 0-4: matched 0.6, mismatched 0.5 (perfect at 0.55); folds 5-9: matched 0.45, mismatched 0.4
    (perfect at 0.425). Mixing both halves moves the threshold so that the other half's pairs fail."""
    scores = np.array([0.6, 0.5] * 5 + [0.45, 0.4] * 5)
    return scores, np.tile([True, False], 10)


def test_fv_accuracy_uses_only_the_fv_folds():
    scores, issame = fv_case()
    first = fv_accuracy(scores, issame, "first")
    assert first["folds"] == [0, 1, 2, 3, 4]
    assert first["mean"] == 1.0
    assert first["thresholds"] == pytest.approx([0.55] * 5)
    assert fv_accuracy(scores, issame, "second")["mean"] == 1.0
    # the same folds with thresholds from all 9 others: 0.425 accepts the 0.5 mismatches
    assert kfold_accuracy(scores, issame, eval_folds=range(5))["mean"] == 0.5


def test_heldout_accuracy_uses_the_other_nine_folds():
    scores, issame = fv_case()
    held = heldout_accuracy(scores, issame, "first")
    assert held["folds"] == [5, 6, 7, 8, 9]
    assert held["thresholds"] == pytest.approx([0.55] * 5)  # 14/18 on the other 9 folds, vs 13/18 at 0.425
    assert held["mean"] == 0.5
    other = heldout_accuracy(scores, issame, "second")
    assert other["folds"] == [0, 1, 2, 3, 4]
    assert other["thresholds"] == pytest.approx([0.425] * 5)
    assert other["mean"] == 0.5


def test_kfold_errors_name_the_problem():
    with pytest.raises(ValueError, match="scores has 20 pairs but issame has 19"):
        kfold_accuracy(np.zeros(20), np.zeros(19, bool))
    with pytest.raises(ValueError, match="issame must be boolean"):
        kfold_accuracy(np.zeros(20), np.full(20, 0.5))
    with pytest.raises(ValueError, match=r"eval_folds \[10\] out of range"):
        kfold_accuracy(np.zeros(20), np.zeros(20, bool), eval_folds=[10])
    with pytest.raises(ValueError, match="no folds left to choose the threshold of fold 2"):
        kfold_accuracy(np.zeros(20), np.zeros(20, bool), eval_folds=[2], threshold_folds=[2])
    with pytest.raises(ValueError, match="NaN"):
        best_threshold([0.1, np.nan], [True, False])


# ---------------------------------------------------------------- TAR@FAR

def test_tar_at_far_hand_made():
    negatives = np.arange(10) / 10  # 0.0 .. 0.9
    positives = np.array([0.85, 0.95, 0.5, 0.05])
    scores = np.r_[positives, negatives]
    issame = np.r_[np.ones(4, bool), np.zeros(10, bool)]
    result = tar_at_far(scores, issame, fars=(0.05, 0.1, 0.3, 1.0))
    assert result[0.05] == {"tar": 0.25, "far": 0.0, "threshold": 0.9}  # no negative may pass
    assert result[0.1] == {"tar": 0.5, "far": 0.1, "threshold": 0.8}  # one negative (0.9) passes
    assert result[0.3]["threshold"] == 0.6 and result[0.3]["tar"] == 0.5 and result[0.3]["far"] == 0.3
    assert result[1.0] == {"tar": 1.0, "far": 1.0, "threshold": -math.inf}


def test_tar_at_far_tied_negatives_keep_far_below_target():
    scores = np.array([0.95, 0.9, 0.9, 0.9] + [0.1] * 7)
    issame = np.r_[[True], np.zeros(10, bool)]
    result = tar_at_far(scores, issame, fars=(0.1,))
    assert result[0.1]["far"] == 0.0  # accepting one 0.9 accepts all three
    assert result[0.1]["tar"] == 1.0


def test_tar_at_far_allows_exactly_far_times_negatives():
    # 0.29 * 100 is 28.999999999999996 in floating point; 29 negatives must still be allowed
    negatives = np.linspace(-0.5, 0.5, 100)
    scores = np.r_[[0.3], negatives]
    issame = np.r_[[True], np.zeros(100, bool)]
    assert tar_at_far(scores, issame, (0.29,))[0.29]["far"] == 0.29
    negatives = np.linspace(-0.5, 0.5, 3000)
    scores = np.r_[[0.3], negatives]
    issame = np.r_[[True], np.zeros(3000, bool)]
    assert tar_at_far(scores, issame, (1e-3,))[1e-3]["far"] == 0.001
    assert tar_key(1e-3) == "tar@far=0.001"


def test_tar_at_far_needs_both_kinds():
    with pytest.raises(ValueError, match="needs both kinds of pairs"):
        tar_at_far([0.1, 0.2], [True, True])
    with pytest.raises(ValueError, match="FAR must be in"):
        tar_at_far([0.1, 0.2], [True, False], fars=(0,))
