"""The cross-device client sampler (Hsu et al., Algorithm 1) and the spread of a round's clients over ranks."""
from __future__ import annotations

import json

import numpy as np
import pytest

from fedmpi.crossdevice.sampler import ClientSampler, assign_to_ranks, clients_per_round


@pytest.mark.parametrize("M, C, count", [(100, 0.1, 10), (100, 0.05, 5), (100, 0.4, 40), (100, 0.001, 1),
                                         (7, 0.5, 3), (10, 1.0, 10), (3, 0.3, 1)])
def test_count_is_max_floor_CM_1_and_the_clients_distinct(M, C, count):
    assert clients_per_round(M, C) == count
    sampler = ClientSampler(M, C, seed=0)
    for _ in range(20):
        ids = sampler.sample()
        assert len(ids) == count and len(np.unique(ids)) == count and 0 <= ids.min() and ids.max() < M


def test_uniform_over_many_rounds():
    """Chi-square of the 100 clients' selection counts over 2,000 rounds of 10 (fixed seed): below the 0.999
    quantile of chi2(99), 148.2; a sampler favouring the first half by 10% would give about 500."""
    sampler = ClientSampler(100, 0.1, seed=123)
    counts = np.bincount(np.concatenate([sampler.sample() for _ in range(2000)]), minlength=100)
    expected = 2000 * 10 / 100
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 148.2, chi2
    pairs = np.zeros((100, 100))            # and no pair of clients comes together more than chance allows
    sampler = ClientSampler(100, 0.1, seed=5)
    for _ in range(2000):
        ids = sampler.sample()
        pairs[np.ix_(ids, ids)] += 1
    off = pairs[~np.eye(100, dtype=bool)]
    assert abs(off.mean() - 2000 * 10 * 9 / (100 * 99)) < 0.05 and off.max() < 2 * off.mean()


def test_same_seed_same_clients_other_seed_others():
    a, b, c = ClientSampler(100, 0.1, 1), ClientSampler(100, 0.1, 1), ClientSampler(100, 0.1, 2)
    ra, rb, rc = ([s.sample() for _ in range(5)] for s in (a, b, c))
    assert all(np.array_equal(x, y) for x, y in zip(ra, rb))
    assert not all(np.array_equal(x, y) for x, y in zip(ra, rc))


def test_state_restores_the_rest_of_the_run():
    full = ClientSampler(100, 0.2, seed=9)
    reference = [full.sample() for _ in range(8)]
    first = ClientSampler(100, 0.2, seed=9)
    [first.sample() for _ in range(3)]
    state = json.loads(json.dumps(first.state_dict()))      # what a checkpoint stores (JSON-able)
    resumed = ClientSampler(100, 0.2, seed=9)
    resumed.load_state_dict(state)
    assert resumed.rounds_drawn == 3
    assert all(np.array_equal(x, resumed.sample()) for x in reference[3:])
    with pytest.raises(ValueError, match=r"client sampler: the checkpoint has seed 9, this run 10"):
        ClientSampler(100, 0.2, seed=10).load_state_dict(state)


def test_assignment_balances_sample_counts():
    sizes = np.array([500] * 10)
    assert assign_to_ranks(np.arange(10), sizes, 2) == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    assert assign_to_ranks(np.array([3]), sizes, 4) == [[3], [], [], []]
    uneven = np.array([900, 100, 100, 100, 400, 300])
    ranks = assign_to_ranks(np.arange(6), uneven, 2)
    assert sorted(sum(ranks, [])) == list(range(6))
    assert sorted(sum(uneven[k] for k in r) for r in ranks) == [900, 1000]   # the best split of 1,900


@pytest.mark.parametrize("overrides, message", [
    (["clients.fraction=0"], "clients.fraction: must be in (0, 1], got 0.0"),
    (["clients.images=600"], "clients.images: 100 clients x 600 images exceed the 50000 training images"),
    (["fed.setting=solo", "fed.solo_party=ms1m"], "fed.setting: solo picks a silo party"),
    (["fv.enabled=true"], "fv.enabled: FV weights silo parties"),
    (["clients.dataset=cifar10"], "clients.path: clients.dataset cifar10 needs the cifar-10-batches-py folder"),
    (["clients.alpha=-1"], "clients.alpha: must be >= 0, got -1.0"),
])
def test_client_config_errors_name_the_key(overrides, message):
    from fedmpi.config import ConfigError, load_config

    with pytest.raises(ConfigError) as info:
        load_config("configs/hsu_cifar10.yaml", overrides)
    assert str(info.value).startswith(message), str(info.value)


def test_hsu_config_layout_and_the_centralized_baseline():
    from fedmpi.config import load_config
    from fedmpi.crossdevice.client_data import partition
    from fedmpi.layout import build_layout

    cfg = load_config("configs/hsu_cifar10.yaml")
    assert build_layout(cfg).as_dict() == {"world": 3, "server": 1, "parties": {"clients": 2}, "validators": 0}
    assert (cfg.clients.population, cfg.clients.images, cfg.optim.batch_size, cfg.optim.weight_decay,
            cfg.fed.local_momentum) == (100, 500, 64, 0.004, 0.0)
    labels = np.repeat(np.arange(10), 30)
    central = load_config("configs/hsu_cifar10.yaml", ["fed.setting=centralized"])
    parts = partition(central, labels)
    assert len(parts) == 1 and parts[0].tolist() == list(range(300))   # one client holding every image
