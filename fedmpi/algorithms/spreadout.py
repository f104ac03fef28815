"""FedAwS's spreadout regulariser (Yu et al. 2020; spec §2.4), the cosine form both face codebases ran:

  L = (1/M) Σ_c Σ_{c' ∈ N(c)} r_cc'²,   r_cc' = max(0, ŵ_c·ŵ_c' − τ)

N(c) = every other row (M = C(C − 1) ordered pairs), or with top_k = k its k nearest other rows (M = C·k; the
neighbours are chosen, not differentiated). All pairs enter, a party's own included. Gradient on the unit rows:
  all pairs:  ∂L/∂ŵ_c = (4/M) Σ_{c'≠c} r_cc' ŵ_c'      (2 from the square × the two ordered copies of a pair)
  top-k:      ∂L/∂ŵ_c = (2/M) (Σ_{c'∈N(c)} r_cc' ŵ_c' + Σ_{c'': c ∈ N(c'')} r_c''c ŵ_c'')
computed a block of anchor rows at a time ([rows, C] cosines in memory). In the squared-Euclidean form of the
paper, (max(0, ν − ‖ŵ_c − ŵ_c'‖²))² = 4 (max(0, cos − (1 − ν/2)))², so τ = 1 − ν/2 (docs/BASELINES.md)."""
from __future__ import annotations

import torch

from fedmpi.algorithms.class_steps import BLOCK_ROWS, blocks, tangent, unit_rows
from fedmpi.models.sgd import MomentumSGD


def spreadout(unit: torch.Tensor, tau: float, top_k: int = 0, block: int = BLOCK_ROWS) -> tuple[float, torch.Tensor]:
    """(L, ∂L/∂ŵ) of the unit rows `unit` [C, d]."""
    C = unit.shape[0]
    grad = torch.zeros_like(unit)
    if C < 2:
        return 0.0, grad
    k = min(top_k, C - 1) if top_k else 0
    pairs = C * k if k else C * (C - 1)
    loss = torch.zeros((), dtype=torch.float64, device=unit.device)
    for a, b in blocks(0, C, block):
        cos = unit[a:b] @ unit.T                                          # [rows, C]
        if k:
            cos[:, a:b].fill_diagonal_(float("-inf"))
            nearest, index = cos.topk(k, dim=1)
            r = (nearest - tau).clamp_min_(0)
            loss += squares(r)
            r.mul_(2.0 / pairs)
            grad[a:b] += (r.unsqueeze(2) * unit[index]).sum(dim=1)
            grad.index_add_(0, index.reshape(-1), (r.unsqueeze(2) * unit[a:b].unsqueeze(1)).reshape(-1, unit.shape[1]))
        else:
            cos[:, a:b].fill_diagonal_(tau)                              # r_cc = 0
            r = cos.sub_(tau).clamp_min_(0)
            loss += squares(r)
            grad[a:b] += (4.0 / pairs) * (r @ unit)
    return float(loss) / pairs, grad


def squares(r: torch.Tensor) -> torch.Tensor:
    """Σ r² without a temporary the size of r (a block is rows x C values): each row's in r's dtype, their sum in
    float64 (a float32 sum over a whole block of 10^8 values is off in the third digit)."""
    return torch.linalg.vector_norm(r, dim=-1).to(torch.float64).pow(2).sum()


def spreadout_gradient(W: torch.Tensor, tau: float, top_k: int = 0, block: int = BLOCK_ROWS) -> tuple[float, torch.Tensor]:
    """(L, ∂L/∂W) for the stored (unnormalised) rows W."""
    unit, norms = unit_rows(W)
    loss, grad = spreadout(unit, tau, top_k, block)
    return loss, tangent(grad, unit, norms)


def spreadout_step(W: torch.Tensor, lr: float, tau: float, top_k: int = 0, steps: int = 1, momentum: float = 0.0,
                   weight_decay: float = 0.0, block: int = BLOCK_ROWS) -> float:
    """W moved in place by `steps` steps of momentum SGD on L (torch.optim.SGD's arithmetic, a fresh optimizer: no
    state outlives the call); returns L before the first step. One plain step (steps = 1, no momentum, no weight
    decay) is the paper's W ← W − λη ∇L; FedFR's baseline runs 20 steps, momentum 0.9, lr 10η, weight decay 5e-4."""
    first = None
    rows = W.detach()
    optimizer = MomentumSGD([rows], lr=lr, momentum=momentum, weight_decay=weight_decay)
    for _ in range(steps):
        loss, rows.grad = spreadout_gradient(rows, tau, top_k, block)
        first = loss if first is None else first
        optimizer.step()
        rows.grad = None
    return first
