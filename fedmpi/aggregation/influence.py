"""How much each party's upload counts in a round's combination, whatever the aggregator (`log.influence`,
the log's `influence` table): the affine weights c (Σ_i c_i = 1) that bring Σ_i c_i θ_i closest to the
combination in the least-squares sense, over the trainable values. For a weighted mean c = w exactly; for Krum,
c is 1 for the chosen upload; for a coordinate-wise rule, each upload's effective share of the result (the
median of three takes a third from an upload that is the middle value a third of the time). `residual` is
‖combination − Σ c_i θ_i‖ / ‖combination − mean_i θ_i‖ (0: the combination is an affine mix of the uploads).
Both are NaN in a round whose uploads or combination are not finite (one the upload check let through, with
fed.upload_check.action off or warn): there is no such mix to measure."""
from __future__ import annotations

import torch

from fedmpi.aggregation.columns import centred_products


def influence_columns(parties: int) -> dict:
    return {"round": ((), "i8"), "weights": ((parties,), "f8"), "residual": ((), "f8")}


def effective_weights(rows: torch.Tensor, combination: torch.Tensor) -> tuple[torch.Tensor, float]:
    """(c [P] float64 summing to 1, relative residual) for rows [P, n] and the combination [n]. With A = rows
    minus their mean m and x = combination − m, c − 1/P is the minimum-norm least-squares solution of Aᵀc = x
    (it lies in A's row space, orthogonal to the ones, since the rows of A sum to zero)."""
    gram, products, norm = centred_products(rows, combination)
    if not (torch.isfinite(gram).all() and torch.isfinite(products).all() and torch.isfinite(norm)):
        return torch.full((rows.shape[0],), float("nan"), dtype=torch.float64), float("nan")
    centred = torch.linalg.pinv(gram, hermitian=True, rtol=1e-10) @ products
    # the ones are in the Gram matrix's null space only up to rounding: what pinv keeps of them goes
    centred -= centred.mean()
    weights = centred + 1.0 / rows.shape[0]
    left = float(norm - 2 * products @ centred + centred @ gram @ centred)     # ‖x − Aᵀc‖²
    return weights, (max(left, 0.0) / float(norm)) ** 0.5 if norm > 0 else 0.0


class Influence:
    """The server's measurement after each round's step (trainable prefix of n values of every upload)."""

    def __init__(self, n_trainable: int):
        self.n = n_trainable
        self.last: dict = {}

    def measure(self, r: int, rows: torch.Tensor, combination: torch.Tensor) -> dict:
        weights, residual = effective_weights(rows[:, :self.n], combination[:self.n])
        self.last = {"round": r, "weights": weights.cpu().numpy(), "residual": residual}
        return self.last
