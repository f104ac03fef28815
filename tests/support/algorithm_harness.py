"""Driving a rule as the roles do, on a small problem in float64, for the algorithm tests: K local steps per
party (up payloads filled at the end), the server's own step on the uploads (ServerStep: Σ w_i of every upload
by the default aggregator, the server update), on_global; and centralized
momentum SGD on the union batch as the reference (docs/DESIGN.md sec. 4). Also one tiny run of a rule through
`python -m fedmpi.run` under mpirun (2 parties, gloo) with its checkpoints."""
import copy

import pytest
import torch

from fedmpi.aggregation.party_rows import PartyRows
from fedmpi.aggregation.server_step import ServerStep
from fedmpi.algorithms import LocalRound, views
from fedmpi.core.state import BackboneState
from fedmpi.core.payloads import Payloads
from tiny_runs import rule_overrides

WD, BETA = 5e-4, 0.9


@pytest.fixture
def float64():
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


class GatheredUploads:
    """The parties' uploads of a round in one [P, D_up] buffer, as the silo exchange holds them after its gather."""

    gives_uploads = True

    def __init__(self, parties: int, numel: int):
        self._rows = PartyRows(parties, numel, dtype=torch.get_default_dtype())
        self.rows = self._rows.rows
        self.upload_names = [chr(ord("a") + i) for i in range(parties)]

    def weighted_mean(self, w, out):
        return self._rows.weighted_sum(w, out)


def federated(algorithm, K, rounds, lrs, weights, classifier_momentum=BETA, parties=3, aggregator=None):
    """Drive a rule exactly as the roles do: K local steps per party (with its up payloads filled at the end),
    then the server's step on the uploads (the rule's aggregator unless one is given, the server update), then
    on_global on every party."""
    backbone, heads, sizes, data = make_problem(parties)
    state = BackboneState(backbone)
    cpu, dtype = torch.device("cpu"), torch.get_default_dtype()
    global_payload, mean = Payloads(state, algorithm.down, cpu, dtype), Payloads(state, algorithm.up, cpu, dtype)
    state.read(global_payload.theta)
    theta, down, n = global_payload.theta, global_payload.extra, state.n_trainable
    server_state = algorithm.init_server_state(global_payload.trainable, down)
    step = ServerStep(algorithm, aggregator or algorithm.aggregator(), global_payload, mean, server_state, n)
    uploads = GatheredUploads(len(heads), mean.flat.numel())
    locals_ = [copy.deepcopy(backbone) for _ in heads]
    states = [algorithm.init_trainer_state(list(m.parameters())) for m in locals_]
    opts = [torch.optim.SGD(h.parameters(), lr=lrs[0], momentum=classifier_momentum, weight_decay=WD) for h in heads]
    for r in range(rounds):
        lr = lrs[r]
        for i, (model, head) in enumerate(zip(locals_, heads)):
            params = list(model.parameters())
            up = Payloads(state, algorithm.up, cpu, dtype)
            rnd = LocalRound(lr=lr, K=K, global_params=views(theta.clone(), params),
                             down={k: views(v, params) for k, v in down.items()},
                             up=up.as_params(params))
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
            up.theta.copy_(flat(model))
            uploads.rows[i].copy_(up.flat)
        previous = theta.clone()
        step(uploads, torch.tensor(weights, dtype=torch.float64))
        for s in states:
            algorithm.on_global(previous, theta, lr, s)
        for m in locals_:
            with torch.no_grad():
                torch.nn.utils.vector_to_parameters(theta.clone(), m.parameters())
    return theta.clone()


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


def recording(rule_class):
    """A subclass of the rule that keeps a reference to every trainer state and server state it creates
    (`.trainers`, `.servers`), for tests of what a rule keeps."""

    class Recording(rule_class):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            self.trainers, self.servers = [], []

        def init_trainer_state(self, params):
            self.trainers.append(super().init_trainer_state(params))
            return self.trainers[-1]

        def init_server_state(self, theta, down=None):
            self.servers.append(super().init_server_state(theta, down))
            return self.servers[-1]

    return Recording


def batch_weights():
    _, _, sizes, _ = make_problem()
    total = sum(sizes)
    return [s / total for s in sizes]


LRS = [0.1] * 4 + [0.01] * 4  # a milestone on a round boundary


def declare_rule(name: str, overrides: list[str], rounds: int = 2, K: int = 2) -> str:
    """The tiny run of a rule, made in the session's one launch of shared runs (tests/support/shared_runs.py)."""
    from shared_runs import declare

    return declare(name, rule_overrides(overrides, rounds, K))


def launch_rule(tmp_path, name: str, overrides: list[str], rounds: int = 2, K: int = 2, data=None):
    """The tiny run of a rule in a launch of its own (data.root: `data`, else tmp_path/data). Returns the run
    folder."""
    from jobs.mpirun import mpirun

    args = ["-m", "fedmpi.run", *rule_overrides(overrides, rounds, K), f"log.dir={tmp_path}", f"log.name={name}",
            f"data.root={data or tmp_path / 'data'}"]
    out = mpirun(4, args, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return tmp_path / name


def checkpoint_parts(run_dir, rounds_done: int) -> dict:
    """{part name: tree} of the run's checkpoint after `rounds_done` rounds."""
    from fedmpi.store.checkpoint import read_part, round_folder_name

    folder = run_dir / "ckpt" / round_folder_name(rounds_done)
    return {path.name: read_part(path) for path in sorted(folder.glob("*.h5"))}


def assert_adaptive_server_step(run_dir, kind: str, lr: float, beta1: float, beta2: float, tau: float) -> None:
    """From the checkpoints after rounds 1 and 2 of a run: round 2's server step is Reddi et al.'s update
    (Alg. 2) of the state after round 1 — Δ (= Θ − Σ w_i θ_i) recovered from m, then v and Θ checked."""
    one, two = (checkpoint_parts(run_dir, r)["server.h5"] for r in (1, 2))
    m1, v1, m2, v2 = one["algorithm"]["m"], one["algorithm"]["v"], two["algorithm"]["m"], two["algorithm"]["v"]
    n = m1.numel()
    delta = (m2 - beta1 * m1) / (1 - beta1)
    square = delta * delta
    if kind == "adam":
        v = beta2 * v1 + (1 - beta2) * square
    elif kind == "yogi":
        v = v1 - (1 - beta2) * square * torch.sign(v1 - square)
    else:
        v = v1 + square
    assert delta.abs().max() > 1e-8
    assert torch.allclose(v2, v, atol=1e-12, rtol=1e-9)
    theta = one["theta"][:n] - lr * m2 / (v2.sqrt() + tau)
    assert torch.allclose(two["theta"][:n], theta, atol=1e-12, rtol=1e-9)
