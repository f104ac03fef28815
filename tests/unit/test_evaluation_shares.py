"""The CIFAR clients' test evaluation shared over ranks (crossdevice/evaluation_shares.py): every batch scored exactly
once, in batch order, so the shares' totals are the one-rank evaluation's to the bit."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedmpi.crossdevice import evaluation
from fedmpi.crossdevice.evaluation_shares import batch_scores, share, totals
from fedmpi.crossdevice.evaluation_shares import test_count as count
from fedmpi.models.cifar_cnn import CifarCNN


def test_shares_split_the_batches_into_contiguous_runs_the_first_ones_longer():
    assert [list(share(8, 3, i)) for i in range(3)] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert [list(share(2, 3, i)) for i in range(3)] == [[0], [1], []]
    assert [list(share(9, 3, i)) for i in range(3)] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


def _test_set(n: int) -> SimpleNamespace:
    rng = np.random.default_rng(0)
    test = SimpleNamespace(images=rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8),
                           labels=rng.integers(0, 10, n).astype(np.int64))
    return SimpleNamespace(test=test, mean=torch.tensor([0.49, 0.48, 0.45], dtype=torch.float64),
                           std=torch.tensor([0.25, 0.24, 0.26], dtype=torch.float64))


@pytest.mark.parametrize("limit, ranks", [(0, 3), (53, 3), (53, 2), (7, 4)])
def test_the_shares_totals_are_the_one_rank_evaluation_bit_for_bit(limit, ranks):
    torch.manual_seed(0)
    model, data, batch = CifarCNN(), _test_set(61), 8
    args = (model, data, limit, batch, torch.device("cpu"), torch.float32)
    batches = -(-count(data, limit) // batch)
    scores = [s for i in range(ranks) for s in batch_scores(*args, share(batches, ranks, i))]
    assert len(scores) == batches
    accuracy, loss = totals(scores, count(data, limit))
    assert (accuracy, loss) == evaluation.test_accuracy(*args)
    assert 0 < loss and accuracy * count(data, limit) == sum(c for c, _ in scores)

