"""The test-set evaluation of a CIFAR cross-device run spread over every rank: while the server evaluates Θ the
trainer ranks would only wait, so the server and each trainer rank score a contiguous share of the test batches
with the same Θ (the trainers hold it: it was just broadcast), and the server sums every batch's (correct, summed
loss) in batch order (totals): the accuracy and the loss are the one-rank evaluation's to the bit
when the ranks run the same kernels (same device kind and thread count)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from fedmpi import comm
from fedmpi.core.schedule import evaluation_due
from fedmpi.crossdevice.client_data import to_tensor

WHAT = "the test set's shares of the evaluation"


def test_count(data, limit: int) -> int:
    """The images an evaluation scores: the first `limit` of the test set (0: all)."""
    return len(data.test.labels) if limit <= 0 else min(limit, len(data.test.labels))


@torch.no_grad()
def batch_scores(model: torch.nn.Module, data, limit: int, batch_size: int, device, dtype,
                 batches: range | None = None) -> list[tuple[int, float]]:
    """(correct, summed cross-entropy) of each test batch in `batches` (default: all); batch i holds images
    i B .. (i + 1) B - 1 of the first `limit` (0: all)."""
    images, labels = data.test.images, data.test.labels
    n = test_count(data, limit)
    scores = []
    was_training = model.training
    model.eval()
    for i in batches if batches is not None else range(-(-n // batch_size)):
        start, end = i * batch_size, min(n, (i + 1) * batch_size)
        # NHWC: the max-pooling and the convolutions of an image batch run 1.5x faster on CPU (docs/PERFORMANCE.md)
        x = to_tensor(images[start:end], data.mean, data.std, dtype).to(device).contiguous(
            memory_format=torch.channels_last)
        y = torch.from_numpy(labels[start:end]).to(device)
        logits = model(x)
        scores.append((int((logits.argmax(1) == y).sum()), float(F.cross_entropy(logits, y, reduction="sum"))))
    model.train(was_training)
    return scores


def totals(scores: list[tuple[int, float]], n: int) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) from every batch's scores, summed in batch order: the same floats whichever
    ranks scored the batches."""
    correct, loss = 0, 0.0
    for c, l in scores:
        correct += c
        loss += l
    return correct / n, loss / n


def share(batches: int, parts: int, i: int) -> range:
    """Part i's batches of `batches` split into `parts` contiguous runs, the first ones one longer."""
    per, extra = divmod(batches, parts)
    start = i * per + min(i, extra)
    return range(start, start + per + (i < extra))


def _my_scores(cfg, data, model, device, dtype, parts: int, i: int) -> list:
    """This rank's batches of the evaluation of the model (which holds Θ)."""
    limit, batch_size = cfg.clients.eval_images, cfg.eval.batch_size
    batches = share(-(-test_count(data, limit) // batch_size), parts, i)
    return batch_scores(model, data, limit, batch_size, device, dtype, batches)


def server_totals(setting) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of Θ, which the server's model holds: the server's share, then each
    trainer rank's, in batch order."""
    cfg, parts, control = setting.cfg, setting.parts, setting.ctx.control
    trainers = setting.ctx.layout.trainer_ranks
    mine = _my_scores(cfg, setting.data, parts.model, parts.device, parts.dtype, 1 + len(trainers), 0)
    theirs = sorted(s for s in comm.gather(None, what=WHAT, timeout_s=control.timeout_s, comm=control.mpi) if s)
    scores = mine + [score for _, part in theirs for score in part]
    return totals(scores, test_count(setting.data, cfg.clients.eval_images))


class TrainerShare:
    """A trainer rank's part: its share of the evaluation in the rounds that end with one (core/schedule.py)."""

    def __init__(self, cfg, rank: int, trainers: list[int], control, parts, data):
        self.cfg, self.control, self.parts, self.data = cfg, control, parts, data
        self.parts_count, self.index = 1 + len(trainers), 1 + trainers.index(rank)

    def round_end(self, r: int, theta: torch.Tensor) -> None:
        cfg, p = self.cfg, self.parts
        if not evaluation_due(r, cfg.eval.every, cfg.rounds):
            return
        p.state.write(theta)      # the next round's clients each start from the global payload again
        scores = _my_scores(cfg, self.data, p.model, p.device, p.dtype, self.parts_count, self.index)
        comm.gather((self.index, scores), what=WHAT, timeout_s=self.control.timeout_s, comm=self.control.mpi)
