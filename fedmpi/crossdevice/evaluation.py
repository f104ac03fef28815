"""Test accuracy of the global model on the held-out test set (Hsu et al. report it for every setting), and the
side work of a cross-device run that measures it (the face clients' is face_evaluation.py's)."""
from __future__ import annotations

import sys

import torch

from fedmpi.core.schedule import evaluation_due
from fedmpi.crossdevice.evaluation_shares import batch_scores, server_totals, test_count, totals

EVAL_COLUMNS = {"round": ((), "i8"), "step": ((), "i8"), "test/accuracy": ((), "f8"), "test/loss": ((), "f8")}


def test_accuracy(model: torch.nn.Module, data, limit: int, batch_size: int, device, dtype) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) over the first `limit` test images (0: all), on this rank alone."""
    return totals(batch_scores(model, data, limit, batch_size, device, dtype), test_count(data, limit))


class ExampleCounts:
    """The cross-device round's weighting: each client by its example count, applied on the trainer ranks before
    the exchange's reduction, so the server's step gets no w (None); when the exchange keeps every client's upload
    (rows), w is n_k / sum n_k over them."""

    def __init__(self, setting):
        self.setting = setting

    def for_round(self, r: int, rows) -> torch.Tensor | None:
        return None if rows is None else self.setting.uploads.example_weights()


class TestAccuracy:
    """The side work of a cross-device run: the test accuracy of Θ when an evaluation is due (nothing runs
    while the clients train: the evaluation needs the round's Θ), the test batches shared with the trainer
    ranks (evaluation_shares.py)."""
    uploads_kept = 0
    what = "test accuracy"       # the score's name in the progress line and the closing summary

    def __init__(self, setting, log, stream=sys.stdout):
        self.setting, self.log, self.stream = setting, log, stream
        self.weighting = ExampleCounts(setting)
        self.first: tuple[int, float] | None = None
        self.last: tuple[int, float] | None = None

    def work_until(self, complete, r: int) -> None:
        pass

    def round_done(self, r: int, theta: torch.Tensor) -> None:
        cfg, s = self.setting.cfg, self.setting
        if not evaluation_due(r, cfg.eval.every, cfg.rounds):
            return
        s.parts.state.write(theta)
        score, columns, line = self.measure()
        self.log.append("eval", round=r, step=r + 1, **columns)
        self.first = self.first or (r, score)
        self.last = (r, score)
        self.stream.write(f"eval after round {r + 1}: {line}\n")
        self.stream.flush()

    def measure(self) -> tuple[float, dict, str]:
        """(the score, the log's /eval columns, the evaluation line) of the model now in parts.model (Θ, which
        the trainer ranks score their shares of: evaluation_shares.py)."""
        s, cfg = self.setting, self.setting.cfg
        accuracy, loss = server_totals(s)
        return accuracy, {"test/accuracy": accuracy, "test/loss": loss}, \
            f"test accuracy {100 * accuracy:.2f}%  loss {loss:.4f}"

    def round_columns(self) -> dict:
        """The /rounds columns every run's log has (schema 1): no FV iteration runs here."""
        return {"fv_iterations": 0}

    def progress_note(self) -> str:
        return f"{self.what} {100 * self.last[1]:.2f}% (round {self.last[0] + 1})" if self.last else ""

    def flush_evaluations(self) -> None:
        """Evaluations run at once: nothing is pending at a checkpoint."""

    def finish(self) -> None:
        pass

    def summary(self) -> str:
        if not self.last:
            return ""
        (r0, a0), (r1, a1) = self.first, self.last
        return f"  {self.what} {100 * a0:.2f}% (round {r0 + 1}) -> {100 * a1:.2f}% (round {r1 + 1})"

    def state_dict(self) -> dict:
        """Nothing: the sampler's and the clients' states are the exchange's."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
