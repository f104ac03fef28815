"""BatchNorm with its statistics frozen on a face client (`clients.batch_norm=frozen`). A client that holds one
identity (or an album of a few) normalises every batch by that identity's own mean and variance in training mode:
what its images share, the very thing the positive-only loss pulls towards w_c, is subtracted before the embedding
(under the faces-devices study's pretrained start, ŵ_c·f̂(x) averages 0.79 with the running statistics and 0.004
with one identity's batch statistics). Frozen, each BatchNorm layer normalises by the running
statistics of Θ (those of the start, which no client then changes) and still trains its scale and shift, which are
averaged with θ. Aggarwal et al.'s SphereNet has no BatchNorm; this is the closest an IResNet comes."""
from __future__ import annotations

import torch
from torch.nn.modules.batchnorm import _BatchNorm


class BatchNormMode:
    """Puts `model`'s BatchNorm layers in eval mode before a client trains (`apply`) when `frozen`; otherwise
    nothing (each client's batches normalise themselves and update the running statistics). Applied per client
    since an evaluation in between puts the whole model back in training mode."""

    def __init__(self, model: torch.nn.Module, frozen: bool):
        self.layers = [m for m in model.modules() if isinstance(m, _BatchNorm)] if frozen else []

    def apply(self) -> None:
        for layer in self.layers:
            layer.eval()
