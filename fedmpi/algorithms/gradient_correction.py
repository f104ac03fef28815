"""FedGC's cross-client correction of the class embeddings (Niu & Deng 2022; spec §1.5): with each class
embedding standing in for its features (a_c = sg(ŵ_c), a constant), the softmax terms a party's local loss
misses for the identities of the other parties:

  Reg(W) = Σ_k Σ_{c ∈ C_k} −log [ e^{s a_c·a_c} / (e^{s a_c·a_c} + Σ_{j ∉ C_k} e^{s a_c·ŵ_j}) ]
         = Σ_k Σ_{c ∈ C_k} log(1 + Σ_{j ∉ C_k} e^{s (a_c·ŵ_j − 1)})            (unit rows: a_c·a_c = 1)

  ∂Reg/∂ŵ_j = s Σ_{k: j ∉ C_k} Σ_{c ∈ C_k} q_cj a_c,   q_cj = e^{s(a_c·ŵ_j − 1)} / (1 + Σ_{l ∉ C_k} e^{s(a_c·ŵ_l − 1)})

and ∂Reg/∂ŵ_c = 0 for an anchor (its own party's rows never meet in a denominator). The shift by s keeps every
exponential in (0, 1]. A block of anchor rows of one party is met against the rows before and after the
party's block (only the Σ_k n_k (C − n_k) cross-party products are computed); with anchors="moving" (the
alternative reading, an option only) the anchors take the gradient s Σ_j q_cj ŵ_j too."""
from __future__ import annotations

import math

import torch

from fedmpi.algorithms.class_steps import BLOCK_ROWS, blocks, tangent, unit_rows


def correction(unit: torch.Tensor, bounds: list[tuple[int, int]], scale: float, block: int = BLOCK_ROWS,
               moving_anchors: bool = False) -> tuple[float, torch.Tensor]:
    """(Reg, ∂Reg/∂ŵ) of the unit rows [C, d], party k owning rows bounds[k] = [start, end)."""
    C = unit.shape[0]
    grad = torch.zeros_like(unit)
    reg = torch.zeros((), dtype=torch.float64, device=unit.device)
    for start, end in bounds:
        others = [(lo, hi) for lo, hi in ((0, start), (end, C)) if hi > lo]
        if not others:
            continue
        for a, b in blocks(start, end, block):
            anchors = unit[a:b]
            exps = [(anchors @ unit[lo:hi].T).sub_(1.0).mul_(scale).exp_() for lo, hi in others]   # [rows, |j|]
            total = sum(e.sum(dim=1) for e in exps).add_(1.0)                                     # the e^s term
            reg += torch.log(total).sum(dtype=torch.float64)
            for e, (lo, hi) in zip(exps, others):
                q = e.div_(total.unsqueeze(1))
                grad[lo:hi] += scale * (q.T @ anchors)
                if moving_anchors:
                    grad[a:b] += scale * (q @ unit[lo:hi])
    return float(reg), grad


def correction_step(W: torch.Tensor, bounds: list[tuple[int, int]], lr: float, scale: float,
                    block: int = BLOCK_ROWS, moving_anchors: bool = False) -> float:
    """W ← W − lr ∂Reg/∂W in place (one plain step, lr = λη; rows not renormalised); returns Reg before it."""
    unit, norms = unit_rows(W)
    reg, grad = correction(unit, bounds, scale, block, moving_anchors)
    W.sub_(tangent(grad, unit, norms), alpha=lr)
    return reg


def correction_flops(rows: list[int], d: int) -> float:
    """Multiply-adds ×2 of one step: the cosines and the gradient's product, each Σ_k n_k (C − n_k) d."""
    C = sum(rows)
    return 2 * 2 * d * math.fsum(n * (C - n) for n in rows)
