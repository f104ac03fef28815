"""The positive-only loss of FedAwS's clients (Yu et al. 2020, spec §2.3): a client that holds only its own classes
pulls each image's embedding towards its own class embedding and nothing pushes it away from the others',

  ℓ_pos(x, c) = (max(0, ν_pos − ŵ_c·f̂(x)))²,   ν_pos = 0.9 (Aggarwal et al.'s FedFace),

mean over the batch; ŵ, f̂ the unit vectors. Its gradient reaches both θ (through f) and w_c. Alone (positive-only
FedAvg) every w_c and f(x) may move to one point: the collapse FedAwS's spreadout on the server prevents."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def positive_loss(rows: torch.Tensor, embeddings: torch.Tensor, labels: torch.Tensor, nu: float) -> torch.Tensor:
    """Mean ℓ_pos of a batch: `rows` [n, d] the client's class embeddings, `embeddings` [b, d] f(x), `labels` [b]
    each image's row."""
    cosine = (F.normalize(embeddings, dim=1) * F.normalize(rows, dim=1)[labels]).sum(dim=1)
    return (nu - cosine).clamp_min(0).square().mean()


def mean_pairwise_cosine(W: torch.Tensor) -> float:
    """The mean of ŵ_i·ŵ_j over the ordered pairs i ≠ j of the rows of W [N, d] (1 when every row points one way:
    the collapse), from ‖Σ ŵ‖² = N + Σ_{i≠j} ŵ_i·ŵ_j, in float64 (O(N d), so at any population); NaN below 2 rows."""
    return cosine_of_sum(unit_sum(W), W.shape[0])


def unit_sum(W: torch.Tensor) -> torch.Tensor:
    """Σ ŵ over the rows of W [N, d], in float64 (a zero row adds nothing)."""
    return F.normalize(W.to(torch.float64), dim=1).sum(dim=0)


def cosine_of_sum(total: torch.Tensor, n: int) -> float:
    """The mean pairwise cosine of n unit rows from their sum `total` (unit_sum): (‖Σ ŵ‖² − n) / (n (n − 1))."""
    if n < 2:
        return float("nan")
    return float((total.dot(total) - n) / (n * (n - 1)))
