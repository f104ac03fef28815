"""A trainer rank's clients of a round trained as one batch (`clients.cohort=vectorised`): the clients of equal size
(Hsu et al.'s partition gives every client the same n) each keep their own model, their own batches and the
rule's per-client state, stacked along a leading client dimension; one step computes every client's gradient of
its own batch's mean loss at its own parameters (torch.func: functional_call under vmap, the convolutions
becoming grouped ones) and the rule's local step moves all of them at once.

That the rule's local step may run on the stacked tensors is what `Algorithm.cohort_vectorisable` says: its
arithmetic is element by element (weight decay, FedProx's mu (theta - Theta), SCAFFOLD's c - c_i, local
momentum, MIME-lite's beta m, FedDyn's terms), so a [clients, ...] parameter with the round's Theta, down
payloads and scalars broadcast over the clients is each client's step side by side. The global model and the down
payloads are shared by every client of the round: they enter as expanded (stride-0) views, read only.

Why: on a GPU a client step of B = 64 on McMahan's CNN is bound by kernel launches, not arithmetic; a cohort's
step launches the kernels of one. On a CPU the arithmetic is the same and the grouped convolutions are slower than
one client's (docs/PERFORMANCE.md), so the client-by-client loop stays the default there.

The results equal the client-by-client loop's up to floating-point rounding: the same batches in the same order
(LocalTrainer.batches), the same rule; only the kernels differ (tests/unit/test_cohort.py states the tolerance).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from fedmpi.algorithms import LocalRound, views


def vectorisable_model(model: torch.nn.Module) -> str | None:
    """Why a model cannot be trained as a stacked cohort, or None: every parameter must be trained and no buffer
    kept (BatchNorm's running statistics are updated in place by every client's forward pass)."""
    if any(not p.requires_grad for p in model.parameters()):
        return "the model has frozen parameters"
    if any(b.is_floating_point() for b in model.buffers()):
        return "the model keeps buffers (BatchNorm statistics), which each client would update in place"
    return None


def _client(state: dict, keys: tuple[str, ...], i: int) -> dict:
    """Client i's slices of the stacked per-client state (views: writing them writes the stack)."""
    return {key: [t[i] for t in state[key]] for key in keys}


def _broadcast(tensors: list[torch.Tensor], m: int) -> list[torch.Tensor]:
    return [t.expand(m, *t.shape) for t in tensors]


class VectorisedCohort:
    """Trains the clients of `local` (a LocalTrainer: model, flat state, rule, data, batches) group by group."""

    def __init__(self, local):
        from torch.func import functional_call, grad_and_value, vmap

        why = vectorisable_model(local.model)
        if why:
            raise ValueError(f"clients.cohort=vectorised: {why}")
        self.local = local
        model = local.model
        self.names = [name for name, _ in model.named_parameters()]

        def loss(params: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(functional_call(model, params, (x,)), y)

        self.gradient = vmap(grad_and_value(loss))   # per client: (d loss / d params, loss)

    def train(self, down: torch.Tensor, clients: list[int], r: int, lr: float,
              states: list[torch.Tensor] | None = None):
        """(upload, mean loss, n_k) per client in the order of `clients`; clients of equal size train together."""
        local = self.local
        if down is not local.down.flat:
            local.down.flat.copy_(down)
        sizes = [len(local.data.parts[k]) for k in clients]
        results = {}
        for n in dict.fromkeys(sizes):
            group = [i for i, size in enumerate(sizes) if size == n]
            uploads, losses = self.train_group([clients[i] for i in group], n, r, lr,
                                               None if states is None else [states[i] for i in group])
            results.update({i: (uploads[j], float(losses[j]), n) for j, i in enumerate(group)})
        for i in range(len(clients)):
            yield results[i]

    def train_group(self, clients: list[int], n: int, r: int, lr: float,
                    states: list[torch.Tensor] | None) -> tuple[torch.Tensor, torch.Tensor]:
        """[m, D_up] uploads [theta_k | up payloads] and the m clients' mean losses (float64), each client of n
        images trained from the global payload for E epochs."""
        local, algorithm = self.local, self.local.algorithm
        m, like = len(clients), local.state.trainable
        D = local.state.numel
        uploads = torch.zeros(m, local.up.flat.numel(), dtype=local.dtype, device=local.device)
        params = [t.clone() for t in _broadcast(views(local.down.trainable, like), m)]
        up = {name: views_rows(uploads, D + j * local.state.n_trainable, like)
              for j, name in enumerate(algorithm.up)}
        rnd = LocalRound(lr=lr, K=local.steps(n), global_params=_broadcast(views(local.down.trainable, like), m),
                         down={name: _broadcast(t, m) for name, t in local.down.as_params(like).items()}, up=up)
        state = {**algorithm.init_trainer_state(params), **local.shared}   # as LocalTrainer.train_client
        layout = local.layout
        if states is not None:
            for i, flat in enumerate(states):
                layout.unpack(flat, _client(state, layout.keys, i))
        losses = []
        streams = [local.batches(k, r) for k in clients]
        for step in range(rnd.K):
            batch = [next(s) for s in streams]
            x = torch.stack([b[0] for b in batch]).to(local.device)
            y = torch.stack([b[1] for b in batch]).to(local.device)
            grads, loss = self.gradient(dict(zip(self.names, params)), x, y)
            rnd.step = step
            with torch.no_grad():
                algorithm.local_step(params, [grads[name] for name in self.names], rnd, state)
            losses.append(loss.detach().to(torch.float64))
        with torch.no_grad():
            algorithm.end_round(params, rnd, state)
            for theta, p in zip(views_rows(uploads, 0, like), params):
                theta.copy_(p)
        if states is not None:
            for i, flat in enumerate(states):
                layout.pack(_client(state, layout.keys, i), out=flat)
        return uploads, torch.stack(losses).mean(0)


def views_rows(rows: torch.Tensor, offset: int, like: list[torch.Tensor]) -> list[torch.Tensor]:
    """Parameter-shaped views [m, *shape] of the columns of `rows` [m, numel] from `offset` on (no copy)."""
    out = []
    for p in like:
        out.append(rows[:, offset:offset + p.numel()].view(rows.shape[0], *p.shape))
        offset += p.numel()
    return out
