"""The rules against the paper's equations and against centralized SGD (docs/DESIGN.md sec. 4), as plain functions."""
import pytest
import torch

from algorithm_harness import BETA, LRS, WD, batch_weights, centralized, federated, float64  # noqa: F401
from fedmpi.algorithms import LocalRound, ServerOptimizer
from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.algorithms.fedavgm import FedAvgM
from fedmpi.algorithms.pfm import PFM

pytestmark = pytest.mark.usefixtures("float64")


def test_pfm_k1_follows_centralized_momentum_sgd():
    w = batch_weights()
    pfm = federated(PFM(momentum=BETA, weight_decay=WD), K=1, rounds=8, lrs=LRS, weights=w)
    ref = centralized(rounds=8, lrs=LRS, weights=w)
    assert torch.allclose(pfm, ref, atol=1e-9, rtol=0)


def test_fedavg_k1_without_momentum_follows_centralized_sgd():
    w = batch_weights()
    fed = federated(FedAvg(local_momentum=0.0, weight_decay=WD), K=1, rounds=8, lrs=LRS, weights=w,
                    classifier_momentum=0.0)
    ref = centralized(rounds=8, lrs=LRS, weights=w, momentum=0.0, classifier_momentum=0.0)
    assert torch.allclose(fed, ref, atol=1e-9, rtol=0)


def test_pfm_k1_differs_from_fedavg_with_local_momentum():
    """The equivalence is not vacuous: FedAvg's per-round-local momentum does not follow centralized momentum."""
    w = batch_weights()
    fed = federated(FedAvg(local_momentum=0.0, weight_decay=WD), K=1, rounds=8, lrs=LRS, weights=w)
    ref = centralized(rounds=8, lrs=LRS, weights=w)
    assert (fed - ref).abs().max() > 1e-4


@pytest.mark.parametrize("nesterov", [True, False])
def test_fedavgm_with_zero_server_momentum_is_fedavg(nesterov):
    w = [0.5, 0.3, 0.2]
    lrs = [0.1, 0.1, 0.1]
    server = ServerOptimizer.build("momentum", 1.0, momentum=0.0, nesterov=nesterov)
    a = federated(FedAvgM(local_momentum=0.9, weight_decay=WD, server=server), K=3, rounds=3, lrs=lrs, weights=w)
    b = federated(FedAvg(local_momentum=0.9, weight_decay=WD), K=3, rounds=3, lrs=lrs, weights=w)
    assert torch.allclose(a, b, atol=1e-12, rtol=0)


def test_fedavgm_server_update_by_hand():
    def update(algorithm, theta, avg, state):
        return algorithm.server_update(theta.clone(), {"theta": avg}, state)

    theta = torch.tensor([1.0, 2.0])
    avg = torch.tensor([0.5, 1.0])          # Delta = [0.5, 1.0]
    nesterov = FedAvgM(server=ServerOptimizer.build("momentum", 2.0, momentum=0.9, nesterov=True))
    s = nesterov.init_server_state(theta)
    out = update(nesterov, theta, avg, s)     # v = Delta; Theta - 2*(0.9 v + Delta) = theta - 3.8 Delta
    assert torch.allclose(out, torch.tensor([1 - 1.9, 2 - 3.8]))
    out2 = update(nesterov, out, out - torch.tensor([0.1, 0.0]), s)  # v = 0.9 v + [0.1, 0]
    v = torch.tensor([0.9 * 0.5 + 0.1, 0.9 * 1.0])
    assert torch.allclose(s["velocity"], v)
    assert torch.allclose(out2, out - 2.0 * (0.9 * v + torch.tensor([0.1, 0.0])))
    heavy = FedAvgM(server=ServerOptimizer.build("momentum", 1.0, momentum=0.9, nesterov=False))
    s = heavy.init_server_state(theta)
    assert torch.allclose(update(heavy, theta, avg, s), theta - torch.tensor([0.5, 1.0]))


def test_pfm_local_step_and_global_momentum_by_hand():
    """eq. 3: theta - lr (g + wd theta + beta M / K); eq. 6: M = (Theta' - Theta) / lr."""
    pfm = PFM(momentum=0.9, weight_decay=0.1)
    theta = [torch.tensor([1.0, -2.0])]
    state = pfm.init_trainer_state(theta)
    pfm.on_global(torch.tensor([3.0, 3.0]), torch.tensor([2.0, 1.0]), 0.5, state)
    assert torch.allclose(state["global_momentum"], torch.tensor([2.0, 4.0]))
    pfm.local_step(theta, [torch.tensor([0.2, 0.4])], LocalRound(lr=0.5, K=4, global_params=[]), state)
    g = torch.tensor([0.2, 0.4]) + 0.1 * torch.tensor([1.0, -2.0]) + 0.9 * torch.tensor([2.0, 4.0]) / 4
    assert torch.allclose(theta[0], torch.tensor([1.0, -2.0]) - 0.5 * g)


@pytest.mark.parametrize("kind", ["adam", "yogi", "adagrad"])
def test_adaptive_server_optimizers_follow_reddi_et_al(kind):
    """Alg. 2 of Adaptive Federated Optimization over two rounds, with their Δ_t = −(Θ − Σ w_i θ_i)."""
    lr, b1, b2, tau = 0.1, 0.8, 0.9, 0.01
    opt = ServerOptimizer.build(kind, lr, beta1=b1, beta2=b2, tau=tau)
    theta = torch.tensor([1.0, -2.0, 0.5])
    state = opt.init(theta)
    m, v = torch.zeros(3), torch.full((3,), tau ** 2)
    expected = theta.clone()
    for mean in (torch.tensor([0.8, -1.0, 0.5]), torch.tensor([0.7, -0.5, 0.9])):
        d = mean - expected                                     # Reddi's Δ_t
        m = b1 * m + (1 - b1) * d
        if kind == "adam":
            v = b2 * v + (1 - b2) * d * d
        elif kind == "yogi":
            v = v - (1 - b2) * d * d * torch.sign(v - d * d)
        else:
            v = v + d * d
        expected = expected + lr * m / (v.sqrt() + tau)
        opt.apply(theta, mean, state)
        assert torch.allclose(theta, expected, atol=1e-12, rtol=0)
    assert torch.allclose(state["v"], v, atol=1e-15, rtol=0)


def test_sgd_server_optimizer_with_lr_1_is_the_average_bit_for_bit_and_scales_otherwise():
    theta, mean = torch.tensor([1.0, 2.0]), torch.tensor([0.3, 0.7])
    assert torch.equal(ServerOptimizer.build("sgd").apply(theta.clone(), mean, {}), mean)
    assert torch.allclose(ServerOptimizer.build("sgd", 0.5).apply(theta.clone(), mean, {}), (theta + mean) / 2)


def test_only_plain_averaging_rules_form_the_average_straight_into_theta():
    from fedmpi.core.build import build_rule
    from fedmpi.config import load_config

    def averages(*overrides):
        return build_rule(load_config(None, list(overrides))).server_averages

    assert averages("fed.algorithm=pfm") and averages("fed.algorithm=fedavg")
    assert not averages("fed.algorithm=fedavg", "fed.server.lr=0.5")
    assert not averages("fed.algorithm=fedavgm") and not averages("fed.algorithm=scaffold")
    assert not averages("fed.algorithm=fedadam") and not averages("fed.algorithm=mime_lite")
