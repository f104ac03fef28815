"""The aggregation primitive: the parties' uploads received into one [P, D] tensor that is kept across rounds,
and Σ_i w_i θ_i (eq. 4) formed with one matrix-vector product into a preallocated buffer: no allocation and
no full copy per round. FV reads the rows in place (no stacking)."""
from __future__ import annotations

import torch


class PartyRows:
    """`buffer` [lead + P, D + c]: `lead` leading rows for the receiving collective's own use (the root's slot of
    a gather), then one row per party: its upload (`rows`, [P, D]) and its c upload columns (`columns`, [P, c]),
    which the weighted sum leaves out."""

    def __init__(self, parties: int, numel: int, *, dtype=torch.float32, device="cpu", lead: int = 0,
                 columns: int = 0):
        self.buffer = torch.zeros(lead + parties, numel + columns, dtype=dtype, device=device)
        self.received = self.buffer[lead:]
        self.rows, self.columns = self.received[:, :numel], self.received[:, numel:]
        self._w = torch.empty(parties, dtype=dtype, device=device)

    def weighted_sum(self, w, out: torch.Tensor) -> torch.Tensor:
        """out ← Σ_i w_i rows[i] (w: P weights, any float dtype or a sequence); returns out."""
        self._w.copy_(torch.as_tensor(w, dtype=self._w.dtype))
        return torch.mv(self.rows.t(), self._w, out=out)
