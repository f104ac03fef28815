"""What the server received in the rounds a run is asked to record (`log.record_received`): the material of a
privacy audit that plays the server (python -m tools.audit, docs/PRIVACY_AUDIT.md). Written by the server rank
into RUN/received/round-R.h5 (R counted from 1, as the progress line counts rounds):

  theta_before  [D]      Θ the round's participants started from
  theta_after   [D]      Θ after the server step: under DP the noised result, under secure aggregation the
                         only view of the sum (Θ_after − Θ_before is the round's aggregate for an averaging rule)
  uploads       [P, U]   each upload as the server held it ([θ_i | the rule's up payloads]), only where the
                         exchange keeps every upload (silo parties in the clear; device clients whose uploads
                         are kept, which the option asks for); absent under secure aggregation
  class_rows    [N, d]   the class embeddings uploaded beside θ (FedAwS / FedGC: every party's rows; face
                         clients: the rows of the round's clients), as the server held them before its class step
  class_row_sender [N]   who sent each row (a party's index in the run's parties; across devices the client)
  class_row_label  [N]   which of its sender's identities the row is (the sender's own label)
  clusters      [N, d+2] PrivacyFace's releases as received, Q rows a sender [centre p | α = arccos κ | released]
  cluster_sender   [N]   who sent each cluster row (as class_row_sender)
  attrs: round, upload_names, numel (of θ), n_trainable, up_numel, secure, dp, cross_device, algorithm
"""
from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import torch

FOLDER = "received"


def round_file(run_dir: Path, round_number: int) -> Path:
    """RUN/received/round-R.h5 of round R (from 1)."""
    return Path(run_dir) / FOLDER / f"round-{round_number}.h5"


class ReceivedRecorder:
    """Records the rounds (from 1) in `rounds`; `attrs` are written with each round (the run's facts)."""

    def __init__(self, run_dir: Path, rounds, attrs: dict):
        self.run_dir, self.rounds, self.attrs = Path(run_dir), {int(r) for r in rounds}, attrs
        self._before: tuple | None = None

    def before_step(self, r: int, theta: torch.Tensor, exchange, classes=None) -> None:
        """Round r (from 0): Θ, the uploads and the class payloads (`classes`: the class exchange, its
        `recorded()`) as they are in hand before the server step."""
        if r + 1 not in self.rounds:
            return
        rows = exchange.rows
        payloads = {} if classes is None else classes.recorded()
        self._before = (theta.detach().cpu().clone(), None if rows is None else rows.detach().cpu().clone(),
                        list(exchange.upload_names), not exchange.gives_uploads,
                        {key: value.detach().cpu().clone() for key, value in payloads.items()})

    def after_step(self, r: int, theta: torch.Tensor) -> None:
        if self._before is None:
            return
        before, rows, names, secure, payloads = self._before
        self._before = None
        path = round_file(self.run_dir, r + 1)
        path.parent.mkdir(exist_ok=True)
        with h5py.File(path, "w") as f:
            f["theta_before"] = before.numpy()
            f["theta_after"] = theta.detach().cpu().numpy()
            if rows is not None:
                f["uploads"] = rows.numpy()
            for key, value in payloads.items():
                f[key] = value.numpy()
            f.attrs.update({**self.attrs, "round": r + 1, "secure": secure,
                            "upload_names": np.array(names, dtype=h5py.string_dtype())})
