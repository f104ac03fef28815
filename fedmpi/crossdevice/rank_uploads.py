"""A trainer rank's uploads of a round (core/seams.py, Uploads): each of its clients' uploads into its row on the
server, or their sum into the server's reduction (crossdevice/exchange.py); under fed.secure_aggregation masked,
each client a participant (core/secure_participant.py)."""
from __future__ import annotations

import numpy as np
import torch

from fedmpi.core.secure_participant import secure_or_plain
from fedmpi.crossdevice.exchange import TrainerSide


class RankUploads:
    """A trainer rank's plain uploads (core/seams.py, Uploads): each client's into its row on the server
    (every_upload), or the rank's sum of its clients' payloads into the server's reduction."""

    def __init__(self, side: TrainerSide, every_upload: bool):
        self.side = side
        self.each = side.send_upload if every_upload else None

    def begin(self, r: int, participants: list[int], down: torch.Tensor) -> None:
        pass

    def end(self, total: torch.Tensor | None = None) -> None:
        if self.each is None:
            self.side.send_local(total)


def rank_uploads(cfg, side: TrainerSide, every_upload: bool, sizes: np.ndarray, backbone: int, up_numel: int):
    """The rank's uploads, masked under fed.secure_aggregation: each client a participant weighing its n_k over
    the largest (public: the partition's), missing each stage with probability clients.dropout."""
    return secure_or_plain(cfg, RankUploads(side, every_upload), side.control, lambda k: f"client {k}", sizes,
                           backbone, up_numel, cfg.clients.dropout)
