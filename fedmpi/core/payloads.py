"""A round's payloads as one flat buffer each: an upload [θ_i | the rule's up payloads | its columns], the global
payload [Θ | the rule's down payloads] (D = the model's flat state, n = its trainable values; the columns: one
value each that the local training declares, LocalTraining.upload_columns)."""
from __future__ import annotations

import torch

from fedmpi.algorithms.base import views
from fedmpi.core.state import BackboneState


class Payloads:
    """One flat buffer `[θ (D) | payload 1 (n) | ... | column 1 (1) | ...]` and its named parts (n = trainable
    values)."""

    def __init__(self, state: BackboneState, names: tuple[str, ...], device, dtype, with_theta: bool = True,
                 zeros=None, columns: tuple[str, ...] = ()):
        """with_theta=False: the payloads only (`flat`, `theta` and `trainable` are None), for a trainer rank that
        fills the rule's up payloads but does not send θ (a party's ranks other than its leader). zeros(numel,
        dtype): where the buffer lives (comm/node_share.py: one copy per node), else a tensor of its own.
        columns: the upload's one-value slots after the payloads (`columns[name]`, a 1-value view)."""
        D, n = (state.numel if with_theta else 0), state.n_trainable
        end = D + n * len(names)
        numel = end + len(columns)
        flat = zeros(numel, dtype) if zeros else torch.zeros(numel, dtype=dtype, device=device)
        self.flat = flat if with_theta else None
        self.theta = flat[:D] if with_theta else None
        self.trainable = flat[:n] if with_theta else None
        self.extra = {name: flat[D + i * n: D + (i + 1) * n] for i, name in enumerate(names)}
        self.columns = {name: flat[end + j: end + j + 1] for j, name in enumerate(columns)}

    def as_params(self, like: list[torch.Tensor]) -> dict[str, list[torch.Tensor]]:
        return {name: views(flat, like) for name, flat in self.extra.items()}
