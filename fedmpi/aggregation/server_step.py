"""The server's step of a round, in place on the global payload: the upload check looks at the uploads (and may
leave some out, aggregation/upload_check.py), the aggregator combines them with the round's weights, then the
rule's server update moves Θ's trainable prefix (frozen parameters and BN statistics take the combination
itself). The round loop (`Server`) calls it once per round; the one-process references of the tests call the same
code (without a check)."""
from __future__ import annotations

import torch

from fedmpi.aggregation.aggregators import Aggregator
from fedmpi.aggregation.upload_check import UploadCheck


class ServerStep:
    """`down`, `mean`: the Payloads of the global payload [Θ | down payloads] and of the combination
    [θ | up payloads] (None for a rule whose step is the combination itself); `state`: the rule's server state
    (init_server_state's); `check`: the upload check (None: every upload is used as it is)."""

    def __init__(self, algorithm, aggregator: Aggregator, down, mean, state: dict, n_trainable: int,
                 check: UploadCheck | None = None):
        self.algorithm, self.aggregator = algorithm, aggregator
        self.down, self.mean, self.state, self.n = down, mean, state, n_trainable
        self.check = check
        aggregator.starts_from(down.flat)

    @property
    def combination(self) -> torch.Tensor:
        """Where the last step's aggregator wrote its combination of the uploads (the global payload itself for a
        rule whose step is the combination)."""
        return self.down.flat if self.algorithm.server_averages else self.mean.flat

    def __call__(self, uploads, w: torch.Tensor, participation: float = 1.0) -> None:
        if self.check is not None:
            uploads, w = self.check(uploads, w, self.aggregator.clips_uploads, self.aggregator.needs_uploads)
        if self.algorithm.server_averages:
            # Θ is the combination itself (eq. 4): formed straight into the global payload
            self.aggregator(uploads, w, self.down.flat)
            return
        self.aggregator(uploads, w, self.mean.flat)
        self.algorithm.server_update(self.down.trainable, {"theta": self.mean.trainable, **self.mean.extra},
                                     self.state, participation=participation)
        self.down.theta[self.n:].copy_(self.mean.theta[self.n:])
