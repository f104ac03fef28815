"""FedAwS's spreadout on the round's rows (fedmpi/algorithms/spreadout_round.py; spec §2.4 and §2.7 item 4) against
a float64 reference written from its definition, on random cases: the loss over the anchors' ordered pairs (every
other row, or each anchor's k nearest among all of W) differentiated by autograd with the other rows held fixed,
then the step on the anchors' stored rows (the tangent projection, momentum SGD); with every row an anchor it is
the all-rows form (spreadout.py); only the anchors move."""
from __future__ import annotations

import pytest
import torch

from fedmpi.algorithms.spreadout import spreadout, spreadout_step
from fedmpi.algorithms.spreadout_round import round_spreadout, round_spreadout_step

D64 = torch.float64


def reference_loss(W, anchors, tau, top_k):
    """L = (1/P) Σ_{c ∈ A} Σ_{c' ∈ N(c)} max(0, ŵ_c·ŵ_c' − τ)², pair by pair; N(c): every other row, or the k rows
    of largest cosine with c (chosen without gradient)."""
    C = W.shape[0]
    U = W / W.norm(dim=1, keepdim=True)
    total, pairs = 0.0, 0
    for c in anchors:
        others = [j for j in range(C) if j != c]
        if top_k:
            with torch.no_grad():
                cos = torch.stack([U[c] @ U[j] for j in others])
            others = [others[i] for i in cos.argsort(descending=True)[:top_k].tolist()]
        for j in others:
            total = total + (U[c] @ U[j] - tau).clamp(min=0) ** 2
            pairs += 1
    return total / pairs


def reference_step(W, anchors, lr, tau, top_k=0, steps=1, momentum=0.0, weight_decay=0.0):
    """torch.optim.SGD over the anchors' rows, the gradient of reference_loss with the other rows fixed."""
    W = W.clone()
    rows = W[anchors].clone().requires_grad_(True)
    optimizer = torch.optim.SGD([rows], lr=lr, momentum=momentum, weight_decay=weight_decay)
    first = None
    for _ in range(steps):
        full = W.index_put((torch.tensor(anchors),), rows)
        loss = reference_loss(full, anchors, tau, top_k)
        first = float(loss.detach()) if first is None else first
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return first, W.index_put((torch.tensor(anchors),), rows.detach())


def random_case(seed, C=9, d=5):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(C, d, generator=g, dtype=D64) * (0.5 + torch.rand(C, 1, generator=g, dtype=D64))
    W[1] = W[0] + 0.1 * torch.randn(d, generator=g, dtype=D64)         # a pair closer than τ for sure
    W[4] = W[0] + 0.2 * torch.randn(d, generator=g, dtype=D64)
    anchors = sorted(torch.randperm(C, generator=g)[:3 + seed % 4].tolist())
    return W, anchors


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("top_k", [0, 3])
def test_one_step_equals_the_reference_in_float64(seed, top_k):
    W, anchors = random_case(seed)
    loss, expected = reference_step(W, anchors, lr=0.7, tau=0.1, top_k=top_k)
    moved = W.clone()
    assert abs(round_spreadout_step(moved, torch.tensor(anchors), 0.7, 0.1, top_k=top_k) - loss) < 1e-13
    assert loss > 0 and torch.allclose(moved, expected, atol=1e-12, rtol=0)
    others = [c for c in range(len(W)) if c not in anchors]
    assert torch.equal(moved[others], W[others]) and not torch.equal(moved[anchors], W[anchors])


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("top_k", [0, 2])
def test_fedfrs_twenty_momentum_steps_with_weight_decay_equal_the_reference(seed, top_k):
    W, anchors = random_case(10 + seed)
    loss, expected = reference_step(W, anchors, 0.3, 0.1, top_k, steps=20, momentum=0.9, weight_decay=5e-4)
    moved = W.clone()
    first = round_spreadout_step(moved, torch.tensor(anchors), 0.3, 0.1, top_k, steps=20, momentum=0.9,
                                 weight_decay=5e-4)
    assert abs(first - loss) < 1e-13 and torch.allclose(moved, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("top_k", [0, 3])
def test_with_every_row_an_anchor_it_is_the_all_rows_form(seed, top_k):
    W, _ = random_case(20 + seed)
    unit = W / W.norm(dim=1, keepdim=True)
    everyone = torch.arange(len(W))
    loss, grad = round_spreadout(unit, everyone, 0.1, top_k)
    all_loss, all_grad = spreadout(unit, 0.1, top_k)
    assert abs(loss - all_loss) < 1e-15 and torch.allclose(grad, all_grad, atol=1e-15, rtol=0)
    moved, all_moved = W.clone(), W.clone()
    assert abs(round_spreadout_step(moved, everyone, 0.5, 0.1, top_k, steps=3, momentum=0.9, weight_decay=5e-4)
               - spreadout_step(all_moved, 0.5, 0.1, top_k, steps=3, momentum=0.9, weight_decay=5e-4)) < 1e-15
    assert torch.allclose(moved, all_moved, atol=1e-12, rtol=0)


def test_anchor_blocks_give_the_one_block_result():
    W, anchors = random_case(30, C=11)
    unit = W / W.norm(dim=1, keepdim=True)
    anchors = torch.tensor(anchors)
    for top_k in (0, 4):
        whole, blocked = round_spreadout(unit, anchors, 0.0, top_k), round_spreadout(unit, anchors, 0.0, top_k, block=2)
        assert abs(whole[0] - blocked[0]) < 1e-15 and torch.allclose(whole[1], blocked[1], atol=1e-15, rtol=0)


def test_a_known_case_an_anchor_and_a_fixed_negative():
    """Two unit rows at 60°, τ = 0.4, anchor 0 only: P = 1, L = (0.5 − 0.4)², ∂L/∂ŵ_0 = 2·0.1·ŵ_1 (ŵ_1 is not an
    anchor: no second term)."""
    unit = torch.tensor([[1.0, 0.0], [0.5, 3 ** 0.5 / 2]], dtype=D64)
    loss, grad = round_spreadout(unit, torch.tensor([0]), 0.4)
    assert loss == pytest.approx(0.01, abs=1e-15)
    assert torch.allclose(grad, 0.2 * unit[1:], atol=1e-15, rtol=0)


@pytest.mark.parametrize("C, a", [(40, 6), (200, 20)])
def test_the_round_form_is_the_all_rows_direction_about_c_over_2a_plus_half_longer(C, a):
    """On the same anchors, the round form's gradient (mean over |A|(C − 1) pairs, the anchors' mutual pairs from
    both ends) against the all-rows one's (mean over C(C − 1)): nearly the same direction, about C / (2|A|) + 1/2
    times longer where the pushes are spread evenly (random rows around one direction), as docs/BASELINES.md says."""
    g = torch.Generator().manual_seed(C)
    cosines, ratios = [], []
    for _ in range(20):
        W = torch.randn(C, 16, generator=g, dtype=D64) + 1.5
        unit = W / W.norm(dim=1, keepdim=True)
        anchors = torch.randperm(C, generator=g)[:a]
        whole, part = spreadout(unit, 0.4)[1][anchors], round_spreadout(unit, anchors, 0.4)[1]
        cosines.append(float((whole * part).sum() / whole.norm() / part.norm()))
        ratios.append(float(part.norm() / whole.norm()))
    assert min(cosines) > 0.99
    assert sum(ratios) / len(ratios) == pytest.approx(C / (2 * a) + 0.5, rel=0.05)
