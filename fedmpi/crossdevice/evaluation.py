"""Test accuracy of the global model on the held-out test set (Hsu et al. report it for every setting)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from fedmpi.crossdevice.client_data import to_tensor

EVAL_COLUMNS = {"round": ((), "i8"), "step": ((), "i8"), "test/accuracy": ((), "f8"), "test/loss": ((), "f8")}


@torch.no_grad()
def test_accuracy(model: torch.nn.Module, data, limit: int, batch_size: int, device, dtype) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) over the first `limit` test images (0: all)."""
    images, labels = data.test.images, data.test.labels
    n = len(labels) if limit <= 0 else min(limit, len(labels))
    correct, loss = 0, 0.0
    was_training = model.training
    model.eval()
    for start in range(0, n, batch_size):
        x = to_tensor(images[start:min(n, start + batch_size)], data.mean, data.std, dtype).to(device)
        y = torch.from_numpy(labels[start:min(n, start + batch_size)]).to(device)
        logits = model(x)
        correct += int((logits.argmax(1) == y).sum())
        loss += float(F.cross_entropy(logits, y, reduction="sum"))
    model.train(was_training)
    return correct / n, loss / n
