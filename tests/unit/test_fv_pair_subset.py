"""FV scored on a fixed subset of the FV folds' pairs (`fv.pairs_per_set`), one process, no launch: which pairs
(FV folds only, spread over them, both kinds, fixed for the run), the score on them (the paper's rule on the
subset's 5 folds), what a validator embeds, and that evaluation still reads every held-out pair."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fedmpi.config import ConfigError, load_config
from fedmpi.core.state import BackboneState
from fedmpi.data import load_bin
from fedmpi.fv.pair_subset import fv_fold_pairs, fv_pair_subset, subset_fv_accuracy
from fedmpi.fv.validator import Validator, prepare_validation_data
from fedmpi.metrics import embed as embed_module
from fedmpi.metrics.evaluator import Evaluator
from fedmpi.metrics.verification import fold_slices, kfold_accuracy
from fedmpi.models.backbone import build_backbone

# 400 pairs in 10 folds of 40; in each fold the first 25 are same-identity pairs
ISSAME = np.tile(np.r_[np.ones(25, bool), np.zeros(15, bool)], 10)


def test_the_subset_is_fv_folds_only_spread_over_them_with_both_kinds():
    chosen = fv_pair_subset(ISSAME, "first", 10, 32, seed=0, name="lfw")
    assert len(chosen) == 32 and np.all(np.diff(chosen) > 0)
    assert chosen.max() < 200                       # folds 0-4: never a held-out pair
    per_fold = np.bincount(chosen // 40, minlength=10)
    assert per_fold.tolist() == [7, 7, 6, 6, 6, 0, 0, 0, 0, 0]   # as fold_slices(32, 5) splits 32
    same = [int(ISSAME[chosen[chosen // 40 == f]].sum()) for f in range(5)]
    assert same == [4, 4, 4, 4, 4]                  # 25/40 of 7 or 6 pairs, rounded
    second = fv_pair_subset(ISSAME, "second", 10, 32, seed=0, name="lfw")
    assert second.min() >= 200


def test_the_subset_is_fixed_by_seed_and_set_and_all_pairs_when_not_smaller():
    a = fv_pair_subset(ISSAME, "first", 10, 30, seed=0, name="lfw")
    assert np.array_equal(a, fv_pair_subset(ISSAME, "first", 10, 30, seed=0, name="lfw"))
    assert not np.array_equal(a, fv_pair_subset(ISSAME, "first", 10, 30, seed=0, name="cplfw"))
    assert not np.array_equal(a, fv_pair_subset(ISSAME, "first", 10, 30, seed=1, name="lfw"))
    everything = fv_fold_pairs(400, "first", 10)
    assert np.array_equal(everything, np.arange(200))
    for pairs in (0, 200, 500):
        assert np.array_equal(fv_pair_subset(ISSAME, "first", 10, pairs, seed=0, name="lfw"), everything)


def test_subset_score_is_the_paper_rule_on_its_five_folds():
    # 10 pairs, 2 per fold (same, different): fold 2's pair is inverted
    scores = np.array([0.9, 0.1, 0.8, 0.2, 0.3, 0.7, 0.9, 0.1, 0.8, 0.2])
    issame = np.array([1, 0, 1, 0, 1, 0, 1, 0, 1, 0], bool)
    # folds 0, 1, 3, 4: the threshold from the other 4 folds (0.75, the highest of the best cuts) separates
    # them; fold 2: the others' threshold is 0.5 (between 0.2 and 0.8), which gets both of its pairs wrong
    assert subset_fv_accuracy(scores, issame, 5) == pytest.approx(4 / 5)
    assert subset_fv_accuracy(scores, issame, 5) == kfold_accuracy(scores, issame, 5)["mean"]


def test_pairs_per_set_below_two_a_fold_is_refused():
    with pytest.raises(ConfigError, match=r"fv.pairs_per_set: must be 0 \(every FV pair\) or >= 10"):
        load_config(None, ["fv.pairs_per_set=6"])
    assert load_config(None).fv.pairs_per_set == 0      # the paper's: every FV pair
    assert load_config("configs/fedface_3party.yaml").fv.pairs_per_set == 0


def test_validator_scores_the_subset_only_and_evaluates_every_heldout_pair(tmp_path, monkeypatch):
    common = ["data.image_size=16", "data.val_pairs_per_fold=8", "model.width=0.125", "model.embedding_size=16",
              f"data.root={tmp_path}", "data.val_sets=[lfw,cplfw]", "eval.batch_size=64"]
    cfg = load_config(None, [*common, "fv.pairs_per_set=20"])
    backbone = build_backbone(cfg, torch.device("cpu"), torch.float32)
    state = BackboneState(backbone)
    flat = state.read()
    flat[:state.n_trainable] += 0.05 * torch.randn(state.n_trainable)   # a model that tells the pairs apart a little
    state.write(flat)
    validator = Validator(cfg, ["lfw", "cplfw"], build_backbone(cfg, torch.device("cpu"), torch.float32),
                          torch.device("cpu"))
    paths = prepare_validation_data(cfg)
    sets = {n: load_bin(paths[n], 16) for n in ("lfw", "cplfw")}
    reference = Evaluator(sets, fv_folds="first", batch_size=64)
    all_scores = reference.pair_scores(backbone)
    expected = {}
    for name, (_, issame) in sets.items():
        chosen = fv_pair_subset(issame, "first", 10, 20, seed=0, name=name)
        assert len(chosen) == 20 and chosen.max() < fold_slices(len(issame), 10)[5].start
        expected[name] = kfold_accuracy(all_scores[name][chosen], issame[chosen], 5)["mean"]
    embedded = []
    real_embed = embed_module.embed_images
    monkeypatch.setattr(embed_module, "embed_images",
                        lambda model, images, *a, **k: embedded.append(len(images)) or real_embed(model, images, *a, **k))
    scores = validator.answer("score", flat)
    assert scores == pytest.approx(expected, abs=1e-12)
    assert embedded == [40, 40]                      # 2 images of each of the 20 pairs, per set
    monkeypatch.setattr(embed_module, "embed_images", real_embed)
    assert validator.answer("evaluate", flat) == reference.evaluate(backbone)
