"""Hsu et al.'s client partition: q_k ~ Dir(alpha p), each image's class drawn from q_k, without replacement."""
from __future__ import annotations

import numpy as np
import pytest

from fedmpi.data.partition import client_class_histogram, hsu_partition, partition_hash

LABELS = np.repeat(np.arange(10), 5000)  # CIFAR-10's training labels: 10 classes of 5,000


@pytest.mark.parametrize("alpha", [100.0, 1.0, 0.1, 0.0])
def test_every_client_holds_exactly_n_distinct_images(alpha):
    parts = hsu_partition(LABELS, 100, 500, alpha, seed=0)
    assert [len(p) for p in parts] == [500] * 100
    assert len(np.unique(np.concatenate(parts))) == 50000    # without replacement: all 50,000 used once


def test_alpha_zero_is_one_class_per_client():
    parts = hsu_partition(LABELS, 100, 500, 0.0, seed=1)
    histogram = client_class_histogram(parts, LABELS, 10)
    assert ((histogram > 0).sum(axis=1) == 1).all()
    assert histogram.sum(axis=0).tolist() == [5000] * 10     # 10 clients per class, exactly


def test_large_alpha_gives_the_prior():
    histogram = client_class_histogram(hsu_partition(LABELS, 100, 500, 1e4, seed=2), LABELS, 10) / 500
    assert np.abs(histogram.mean(axis=0) - 0.1).max() < 0.005
    # each client near p (binomial spread of 500 draws) until the pools run low: the population uses all
    # 50,000 images, so the last clients take what is left (the dry-pool rule), which need not be p
    assert np.abs(histogram[:80] - 0.1).max() < 0.09
    skew = [np.mean(np.max(client_class_histogram(hsu_partition(LABELS, 100, 500, a, 3), LABELS, 10), axis=1))
            for a in (100.0, 1.0, 0.1, 0.0)]                  # the largest class share grows as alpha falls
    assert skew == sorted(skew) and skew[-1] == 500


def test_dry_pool_redraws_from_the_clients_other_classes_then_the_prior():
    labels = np.repeat([0, 1, 2], [3, 100, 100])
    # q ~ Dir(alpha p) with p almost all on class 0: the first client wants ~10 images of class 0, which has 3
    parts = hsu_partition(labels, 2, 10, 1e6, seed=0, prior=[0.98, 0.01, 0.01])
    histogram = client_class_histogram(parts, labels, 3)
    assert histogram.sum(axis=1).tolist() == [10, 10]
    assert histogram[:, 0].sum() == 3                          # every class-0 image used, none twice
    assert len(np.unique(np.concatenate(parts))) == 20
    # a client whose q puts everything on a dry class continues with the prior's classes
    parts = hsu_partition(np.repeat([0, 1], [2, 50]), 3, 5, 1e6, seed=0, prior=[1.0, 0.0])
    assert [len(p) for p in parts] == [5, 5, 5]


def test_alpha_zero_that_cannot_fit_one_class_per_client_is_an_error():
    with pytest.raises(ValueError, match=r"alpha = 0: no class has 3 images left for client 2"):
        hsu_partition(np.repeat([0, 1], [5, 5]), 3, 3, 0.0, seed=0)   # 9 <= 10 images, but 2 + 2 left


def test_same_seed_same_partition_and_a_stable_hash():
    a = hsu_partition(LABELS, 100, 500, 0.5, seed=7)
    b = hsu_partition(LABELS, 100, 500, 0.5, seed=7)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert partition_hash(a) == partition_hash(b) != partition_hash(hsu_partition(LABELS, 100, 500, 0.5, seed=8))
    assert partition_hash(hsu_partition(LABELS, 10, 50, 1.0, seed=0)) == PINNED_HASH  # across versions


PINNED_HASH = "eeca27570f81e9ea"


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"101 clients x 500 images = 50500 exceeds the 50000 images"):
        hsu_partition(LABELS, 101, 500, 1.0, 0)
    with pytest.raises(ValueError, match=r"Dirichlet alpha must be >= 0, got -1"):
        hsu_partition(LABELS, 10, 5, -1, 0)
