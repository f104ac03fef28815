"""FedGC across devices (crossdevice/class_rows.py): a face client's positive-only loss pushes none of its rows away
from another, so the server's correction takes every identity as its own party (IdentityBounds). Its step on the
store's rows equals, in float64, Reg's gradient step written from the spec (fr_baselines_spec §1.5; one plain step
W ← W − λη ∂Reg/∂W through the tangent projection), for one identity a client and for albums of two, where the
two rows of one client are each other's negatives too; the clients not yet seen are neither moved nor negatives."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.algorithms.fedgc import FedGC, FedGCOptions
from fedmpi.crossdevice.class_rows import DeviceKit
from fedmpi.crossdevice.client_state import client_store


def reference_step(W: np.ndarray, lr: float, s: float) -> tuple[float, np.ndarray]:
    """(Reg, W after the step), every row its own party: Reg = Σ_c −log(e^{s} / (e^{s} + Σ_{j≠c} e^{s a_c·ŵ_j})),
    ∂Reg/∂ŵ_j = s Σ_{c≠j} q_cj a_c, ∂L/∂w = (I − ŵŵᵀ) g / ‖w‖."""
    norms = np.linalg.norm(W, axis=1, keepdims=True)
    unit = W / norms
    cos = unit @ unit.T
    e = np.exp(s * cos)
    np.fill_diagonal(e, 0.0)
    denominator = np.exp(s) + e.sum(axis=1)
    reg = float(np.sum(-np.log(np.exp(s) / denominator)))
    q = e / denominator[:, None]                        # q[c, j]
    grad_unit = s * q.T @ unit                          # row j: s Σ_c q_cj a_c
    grad = (grad_unit - unit * (grad_unit * unit).sum(1, keepdims=True)) / norms
    return reg, W - lr * grad


@pytest.mark.parametrize("per_client", [1, 2])
@pytest.mark.parametrize("seed", range(3))
def test_fedgc_across_devices_equals_the_spec_with_every_identity_its_own_party(per_client, seed):
    d, M, lr, lam, s = 6, 7, 0.05, 3.0, 4.0
    g = torch.Generator().manual_seed(seed)
    store = client_store(FedAvg(), [torch.zeros(1, dtype=torch.float64)], population=M, rows=per_client * d)
    store.rows.copy_(torch.randn(M, per_client * d, generator=g, dtype=torch.float64) * 0.8)
    seen = [0, 2, 3, 5, 6]
    store.seen[seen] = True
    before = store.rows.clone()
    exchange = FedGC(FedGCOptions(lr_scale=lam, scale=s)).classes.server_side(DeviceKit(store, d))
    exchange.step(0, lr, {})
    reg, expected = reference_step(before[seen].reshape(-1, d).numpy(), lam * lr, s)
    assert exchange.row["reg"] == pytest.approx(reg, rel=1e-12)
    np.testing.assert_allclose(store.rows[seen].reshape(-1, d).numpy(), expected, rtol=0, atol=1e-13)
    assert torch.equal(store.rows[[1, 4]], before[[1, 4]])          # not yet seen: untouched, no negative


def test_two_rows_of_one_album_are_pushed_apart():
    """Client 0's two identities nearly coincide, client 1's row lies far off: the correction moves client 0's rows
    apart (a silo party's own rows would be left to its softmax)."""
    d = 3
    store = client_store(FedAvg(), [torch.zeros(1, dtype=torch.float64)], population=2, rows=2 * d)
    store.put_round(0, [(0, torch.tensor([1.0, 0.05, 0, 1.0, -0.05, 0], dtype=torch.float64)),
                        (1, torch.tensor([0, 0, 1.0, 0, 0.1, 1.0], dtype=torch.float64))])
    first = store.rows[0].view(2, d)
    cos_before = float(torch.nn.functional.cosine_similarity(first[0], first[1], dim=0))
    FedGC(FedGCOptions(lr_scale=1.0, scale=16.0)).classes.server_side(DeviceKit(store, d)).step(0, 0.1, {})
    cos_after = float(torch.nn.functional.cosine_similarity(first[0], first[1], dim=0))
    assert cos_after < cos_before - 0.01, (cos_before, cos_after)
