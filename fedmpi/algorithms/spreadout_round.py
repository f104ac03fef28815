"""FedAwS's spreadout on the rows of a round's parties only (spec §2.7 item 4: FedFR regularises the rows of the
parties that took part this round; Aggarwal's FedFace all rows, fedmpi/algorithms/spreadout.py). The anchors A are
the round's rows; each anchor's negatives are every other row of W, or its k nearest among all of W (spec §2.4's
top-k for large C, chosen, not differentiated):

  L = (1/P) Σ_{c ∈ A} Σ_{c' ∈ N(c)} r_cc'²,   r_cc' = max(0, ŵ_c·ŵ_c' − τ),   P = |A|(C − 1), or |A|·k with top-k

and only the anchors' rows move, the others held fixed: for c ∈ A

  ∂L/∂ŵ_c = (2/P) (Σ_{c' ∈ N(c)} r_cc' ŵ_c' + Σ_{c'' ∈ A: c ∈ N(c'')} r_c''c ŵ_c'')

(the second sum: c as another anchor's negative). When every row is an anchor, L and this gradient are those of
the all-rows form: with all pairs the two sums are equal (r is symmetric), giving its (4/P) Σ_{c'≠c} r_cc' ŵ_c'. A
step costs O(|A| C d) (the anchors' cosines against all of W) where the all-rows form costs O(C² d); the gradient's
product runs over the rows within τ of some anchor only."""
from __future__ import annotations

import torch

from fedmpi.algorithms.class_steps import BLOCK_ROWS, blocks, tangent, unit_rows
from fedmpi.algorithms.spreadout import squares
from fedmpi.models.sgd import MomentumSGD


def round_spreadout(unit: torch.Tensor, anchors: torch.Tensor, tau: float, top_k: int = 0,
                    block: int = BLOCK_ROWS) -> tuple[float, torch.Tensor]:
    """(L, ∂L/∂ŵ of the anchors [|A|, d]) of the unit rows `unit` [C, d], `anchors` [|A|] distinct row indices."""
    C, a = unit.shape[0], len(anchors)
    grad = torch.zeros(a, unit.shape[1], dtype=unit.dtype, device=unit.device)
    if C < 2 or not a:
        return 0.0, grad
    k = min(top_k, C - 1) if top_k else 0
    pairs = a * k if k else a * (C - 1)
    position = torch.full((C,), -1, dtype=torch.int64, device=unit.device)   # row -> its place among the anchors
    position[anchors] = torch.arange(a, device=unit.device)
    loss = torch.zeros((), dtype=torch.float64, device=unit.device)
    for i, j in blocks(0, a, block):
        rows = anchors[i:j]
        own = torch.arange(j - i, device=unit.device)
        cos = unit[rows] @ unit.T                                          # [rows, C]
        if k:
            cos[own, rows] = float("-inf")
            nearest, index = cos.topk(k, dim=1)
            r = (nearest - tau).clamp_min_(0)
            loss += squares(r)
            r.mul_(2.0 / pairs)
            grad[i:j] += (r.unsqueeze(2) * unit[index]).sum(dim=1)
            among = position[index]                                       # a neighbour that is an anchor moves too
            hit = among >= 0
            pushes = (r.unsqueeze(2) * unit[rows].unsqueeze(1))[hit]
            grad.index_add_(0, among[hit], pushes)
        else:
            cos[own, rows] = tau                                           # r_cc = 0
            r = cos.sub_(tau).clamp_min_(0)
            loss += squares(r)
            r.mul_(2.0 / pairs)
            near = r.any(dim=0).nonzero().flatten()                       # r is 0 beyond τ: rows spread apart
            grad[i:j] += r[:, near] @ unit[near]                         # are most of W, and add nothing
            grad += r[:, anchors].T @ unit[rows]
    return float(loss) / pairs, grad


def round_spreadout_step(W: torch.Tensor, anchors: torch.Tensor, lr: float, tau: float, top_k: int = 0,
                         steps: int = 1, momentum: float = 0.0, weight_decay: float = 0.0,
                         block: int = BLOCK_ROWS) -> float:
    """The anchors' rows of W moved in place by `steps` steps of momentum SGD on L (a fresh optimizer over those rows
    only, as spreadout.spreadout_step over all); the other rows are the fixed negatives. Returns L before the first
    step. The negatives are normalised once; each step renormalises only the anchors."""
    anchors = torch.as_tensor(anchors, dtype=torch.int64, device=W.device)
    unit, _ = unit_rows(W.detach())
    rows = W.detach()[anchors]
    optimizer = MomentumSGD([rows], lr=lr, momentum=momentum, weight_decay=weight_decay)
    first = None
    for _ in range(steps):
        own, norms = unit_rows(rows)
        unit[anchors] = own
        loss, grad = round_spreadout(unit, anchors, tau, top_k, block)
        first = loss if first is None else first
        rows.grad = tangent(grad, own, norms)
        optimizer.step()
        rows.grad = None
    W.detach()[anchors] = rows
    return first
