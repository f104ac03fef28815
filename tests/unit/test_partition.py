"""Silo splits by identity and Hsu et al.'s Dirichlet client partitions."""
from __future__ import annotations

import numpy as np
import pytest

from fedmpi.data import dirichlet_partition, partition_hash, split_by_identity

LABELS = np.repeat(np.arange(10), 500)  # CIFAR-10-like: 10 classes of 500


def test_split_by_identity_is_even_contiguous_and_complete():
    parts = [split_by_identity(10, 4, i) for i in range(4)]
    assert [p.tolist() for p in parts] == [[0, 1], [2, 3, 4], [5, 6], [7, 8, 9]]
    assert [len(split_by_identity(85742, 4, i)) for i in range(4)] == [21435, 21436, 21435, 21436]
    assert split_by_identity(7, 1, 0).tolist() == list(range(7))


def test_split_by_identity_errors():
    with pytest.raises(ValueError, match=r"split index 4 must lie in 0..3 \(split_count=4\)"):
        split_by_identity(10, 4, 4)
    with pytest.raises(ValueError, match=r"cannot split 3 identities into 4 non-empty parts"):
        split_by_identity(3, 4, 0)


def class_mix(parts, labels=LABELS, classes=10):
    return np.array([np.bincount(labels[p], minlength=classes) / len(p) for p in parts])


def test_alpha_zero_gives_one_class_per_client():
    parts = dirichlet_partition(LABELS, 100, 0.0, seed=0)
    assert [len(p) for p in parts] == [50] * 100
    assert all(len(np.unique(LABELS[p])) == 1 for p in parts)
    all_indices = np.concatenate(parts)
    assert len(np.unique(all_indices)) == 5000  # without replacement: every example used once


def test_large_alpha_approaches_the_prior():
    parts = dirichlet_partition(LABELS, 10, 1e5, seed=0)
    assert np.abs(class_mix(parts) - 0.1).max() < 0.01
    skewed_labels = np.repeat(np.arange(4), [4000, 2000, 1000, 1000])
    prior = np.array([0.5, 0.25, 0.125, 0.125])
    parts = dirichlet_partition(skewed_labels, 8, 1e5, seed=1)  # prior defaults to the class frequencies
    assert np.abs(class_mix(parts, skewed_labels, 4) - prior).max() < 0.01
    parts = dirichlet_partition(skewed_labels, 8, 1e5, seed=1, prior=[0.25] * 4)
    assert np.abs(class_mix(parts, skewed_labels, 4)[:2] - 0.25).max() < 0.01


def test_skew_grows_as_alpha_falls():
    classes_per_client = [np.mean([len(np.unique(LABELS[p])) for p in dirichlet_partition(LABELS, 100, a, 3)])
                          for a in (100.0, 1.0, 0.1, 0.0)]
    assert classes_per_client[0] > 9.5 and classes_per_client[-1] == 1.0
    assert classes_per_client == sorted(classes_per_client, reverse=True)


def test_same_seed_same_partition_and_hash():
    a = dirichlet_partition(LABELS, 20, 0.5, seed=7)
    b = dirichlet_partition(LABELS, 20, 0.5, seed=7)
    c = dirichlet_partition(LABELS, 20, 0.5, seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert partition_hash(a) == partition_hash(b) != partition_hash(c)
    assert partition_hash([[0, 1], [2]]) != partition_hash([[2], [0, 1]]) != partition_hash([[0], [1, 2]])
    assert partition_hash([[0, 1], [2]]) == "4c152be4bb1a4f40"  # the fingerprint format is stable across versions


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"cannot partition 3 examples among 4 clients"):
        dirichlet_partition([0, 1, 2], 4, 1.0, 0)
    with pytest.raises(ValueError, match=r"Dirichlet alpha must be >= 0, got -1"):
        dirichlet_partition(LABELS, 4, -1, 0)
    with pytest.raises(ValueError, match=r"prior must be 10 non-negative weights"):
        dirichlet_partition(LABELS, 4, 1.0, 0, prior=[1, 1])


def test_a_party_can_be_one_client_of_a_dirichlet_partition_recorded_for_the_log(tmp_path):
    """Config -> dataset: parties.NAME.data.dirichlet_* select one client; seed and partition hash are described."""
    from fedmpi.config import load_config
    from fedmpi.data import open_training_set
    from fedmpi.run import prepare_data
    from fedmpi.layout import build_layout

    common = ["parties=[{name: a, data: {identities: 12, images_per_identity: 5, dirichlet_clients: 3, "
              "dirichlet_client: 1, dirichlet_alpha: 0.0, dirichlet_seed: 7}}]",
              "data.image_size=16", f"data.root={tmp_path}"]
    cfg = load_config(None, common)
    description = prepare_data(cfg, build_layout(cfg))["a"]
    client = open_training_set(cfg.parties[0].data, cfg.data)
    assert client.num_classes == 1 and len(client) == 5    # alpha = 0: one class per client, all its images
    assert description["dirichlet"]["seed"] == 7 and description["dirichlet"]["clients"] == 3
    again = open_training_set(cfg.parties[0].data, cfg.data).describe()["dirichlet"]["hash"]
    assert again == description["dirichlet"]["hash"]
    other = load_config(None, [*common, "parties.a.data.dirichlet_seed=8"])
    assert open_training_set(other.parties[0].data, other.data).describe()["dirichlet"]["hash"] != again
    with pytest.raises(Exception, match=r"parties.a.data.dirichlet_client: must be in 0..dirichlet_clients-1"):
        load_config(None, [*common, "parties.a.data.dirichlet_client=3"])
