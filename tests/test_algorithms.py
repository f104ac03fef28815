"""The rules against the paper's equations and against centralized SGD (DESIGN.md sec. 4), as plain functions."""
import copy

import pytest
import torch

from fedmpi.algorithms import LocalRound, ServerOptimizer, views
from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.algorithms.fedavgm import FedAvgM
from fedmpi.algorithms.pfm import PFM

WD, BETA = 5e-4, 0.9


@pytest.fixture(autouse=True)
def float64_by_default():
    """These checks run in float64; restore the default so other test modules see float32."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def make_problem(parties=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    backbone = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    with torch.no_grad():
        for p in backbone.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    heads = [torch.nn.Linear(4, 3 + i, bias=False) for i in range(parties)]
    for h in heads:
        with torch.no_grad():
            h.weight.copy_(torch.randn(h.weight.shape, generator=g))
    batch_sizes = [4 + 2 * i for i in range(parties)]
    data = [[(torch.randn(b, 6, generator=g), torch.randint(0, 3 + i, (b,), generator=g)) for _ in range(12)]
            for i, b in enumerate(batch_sizes)]
    return backbone, heads, batch_sizes, data


def party_loss(backbone, head, batch):
    x, y = batch
    return torch.nn.functional.cross_entropy(head(backbone(x)), y)


def flat(module):
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])


def federated(algorithm, K, rounds, lrs, weights, classifier_momentum=BETA, parties=3):
    """Drive a rule exactly as the roles do: K local steps per party (with its up payloads filled at the end),
    then aggregate Σ w_i of every upload, the server update, then on_global on every party."""
    backbone, heads, sizes, data = make_problem(parties)
    theta = flat(backbone)
    n = theta.numel()
    down = {name: torch.zeros(n) for name in algorithm.down}
    server_state = algorithm.init_server_state(theta, down)
    locals_ = [copy.deepcopy(backbone) for _ in heads]
    states = [algorithm.init_trainer_state(list(m.parameters())) for m in locals_]
    opts = [torch.optim.SGD(h.parameters(), lr=lrs[0], momentum=classifier_momentum, weight_decay=WD) for h in heads]
    for r in range(rounds):
        lr = lrs[r]
        uploads = []
        for i, (model, head) in enumerate(zip(locals_, heads)):
            params = list(model.parameters())
            up = {name: torch.zeros(n) for name in algorithm.up}
            rnd = LocalRound(lr=lr, K=K, global_params=views(theta.clone(), params),
                             down={k: views(v, params) for k, v in down.items()},
                             up={k: views(v, params) for k, v in up.items()})
            for group in opts[i].param_groups:
                group["lr"] = lr
            for k in range(K):
                rnd.step = k
                loss = party_loss(model, head, data[i][r * K + k])
                loss.backward()
                with torch.no_grad():
                    algorithm.local_step(params, [p.grad for p in params], rnd, states[i])
                opts[i].step()
                for p in (*params, *head.parameters()):
                    p.grad = None
            with torch.no_grad():
                algorithm.end_round(params, rnd, states[i])
            uploads.append({"theta": flat(model), **up})
        mean = {key: sum(w * u[key] for w, u in zip(weights, uploads)) for key in uploads[0]}
        previous = theta.clone()
        algorithm.server_update(theta, mean, server_state)
        for s in states:
            algorithm.on_global(previous, theta, lr, s)
        for m in locals_:
            with torch.no_grad():
                torch.nn.utils.vector_to_parameters(theta.clone(), m.parameters())
    return theta


def centralized(rounds, lrs, weights, momentum=BETA, classifier_momentum=BETA):
    """Momentum SGD on the union batch: backbone gradient = sum_i w_i grad L_i, each classifier its own grad."""
    backbone, heads, sizes, data = make_problem()
    opt = torch.optim.SGD(backbone.parameters(), lr=lrs[0], momentum=momentum, weight_decay=WD)
    head_opts = [torch.optim.SGD(h.parameters(), lr=lrs[0], momentum=classifier_momentum, weight_decay=WD)
                 for h in heads]
    for r in range(rounds):
        for o in (opt, *head_opts):
            for group in o.param_groups:
                group["lr"] = lrs[r]
        losses = [party_loss(backbone, h, data[i][r]) for i, h in enumerate(heads)]
        backbone_grads = [torch.autograd.grad(l, list(backbone.parameters()), retain_graph=True) for l in losses]
        for i, (l, h) in enumerate(zip(losses, heads)):
            (gw,) = torch.autograd.grad(l, [h.weight])
            h.weight.grad = gw
        for j, p in enumerate(backbone.parameters()):
            p.grad = sum(w * g[j] for w, g in zip(weights, backbone_grads))
        opt.step()
        for o in head_opts:
            o.step()
    return flat(backbone)


def batch_weights():
    _, _, sizes, _ = make_problem()
    total = sum(sizes)
    return [s / total for s in sizes]


LRS = [0.1] * 4 + [0.01] * 4  # a milestone on a round boundary


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
