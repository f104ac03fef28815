"""A trainer rank's work in a round: its clients one after another, each from the global model (Hsu et al.,
Algorithm 1: E epochs of batches of B over the client's n_k images, the rule's local step), summed as
sum_k n_k [theta_k | up payloads] and sum_k n_k in float64, which the ranks then reduce to the server."""
from __future__ import annotations

import numpy as np
import torch

from fedmpi.aggregation.dp import clip_into
from fedmpi.algorithms import LocalRound, views
from fedmpi.algorithms.objective import PartyTraining, RoundData
from fedmpi.crossdevice.client_data import ClientData
from fedmpi.crossdevice.client_heads import ImageClasses
from fedmpi.crossdevice.client_state import StateLayout
from fedmpi.crossdevice.cohort import VectorisedCohort
from fedmpi.core.payloads import Payloads


def client_seed(seed: int, r: int, k: int) -> int:
    """The seed of client k's batch order in round r: independent of which rank trains it, so the global model
    does not depend on the number of trainer ranks."""
    return int(np.random.SeedSequence([seed, r, k]).generate_state(1, np.uint64)[0] >> 1)


class LocalTrainer:
    """`down`: the global payload [Theta | the rule's down payloads] the clients start from (the trainer rank
    receives into down.flat); `up`: the upload [theta_k | up payloads] of the client just trained; `shared`: the
    rule's global_state (rebuilt by on_global, one per rank); `layout`: the rule's per-client state, if any;
    `clip`: fed.dp's C when DP is on (each client's update clipped and counted once, fedmpi/aggregation/dp.py);
    `vectorised`: a round's clients of equal size trained as one batch (crossdevice/cohort.py); `head`: the
    clients' head (client_heads.py), whose loss the method's local objective (`algorithm.training`, built here on
    a client-shaped view, `client`: the client being trained) makes the step's loss."""

    def __init__(self, model: torch.nn.Module, state, algorithm, data: ClientData, *, epochs: int, batch_size: int,
                 seed: int, augment: bool, device, dtype, clip: float | None = None, vectorised: bool = False,
                 head=None):
        self.model, self.state, self.algorithm, self.data, self.clip = model, state, algorithm, data, clip
        self.head = head or ImageClasses()
        self.epochs, self.batch_size, self.seed, self.augment = epochs, batch_size, seed, augment
        self.device, self.dtype = device, dtype
        self.client = -1
        view = PartyTraining(backbone=model, dataset=data, batch_size=batch_size, seed=seed,
                             rounds=self.client_rounds, device=device, dtype=dtype)
        self.objective = algorithm.training.objective(algorithm.options, view)
        self.objective.start(0)     # a client's batches come from (seed, round, client): no stream to resume
        self.down = Payloads(state, algorithm.down, device, dtype)
        self.up = Payloads(state, algorithm.up, device, dtype)
        rows = self.head.rows
        self.layout = StateLayout(algorithm, state.trainable, rows) if algorithm.client_state or rows else None
        template = algorithm.init_trainer_state(state.trainable)
        self.shared = {key: template[key] for key in algorithm.global_state}
        self.cohort = VectorisedCohort(self) if vectorised else None

    def payload(self) -> torch.Tensor:
        """float64 [up + 1]: sum_k n_k [theta_k | up payloads], then sum_k n_k (zero when no client trains)."""
        return torch.zeros(self.up.flat.numel() + 1, dtype=torch.float64, device=self.device)

    def train_round(self, down: torch.Tensor, clients: list[int], r: int, lr: float,
                    states: list[torch.Tensor] | None = None, each=None) -> tuple[torch.Tensor, dict]:
        """(payload, statistics) after training `clients` from the global payload `down` in round r; `states`:
        the clients' states (per-client rules), updated in place. `each`: called with every client's upload
        [theta_k | up payloads] as it is trained (the payload then sums only the counts)."""
        out = self.payload()
        loss_sum, examples, images = 0.0, 0, 0
        for upload, loss, n in self.trained(down, clients, r, lr, states):
            if each is not None:
                each(upload)
                out[-1] += n
            elif self.clip is None:
                out[:-1].add_(upload.to(torch.float64), alpha=n)
                out[-1] += n
            else:       # DP's rules have no payloads: the upload is theta_k, the reference Theta
                clip_into(out[:-1], upload, self.down.theta, self.clip)
                out[-1] += 1
            loss_sum += loss * n
            examples += n
            images += n * self.epochs
        # the loss is n_k-weighted whatever the aggregation weighs (DP counts every client once)
        return out, {"clients": len(clients), "examples": examples, "loss_sum": loss_sum, "images": images}

    def trained(self, down: torch.Tensor, clients: list[int], r: int, lr: float,
                states: list[torch.Tensor] | None = None):
        """(upload [theta_k | up payloads], mean loss, n_k) of each client in the order of `clients`: one after
        another, or with a cohort (crossdevice/cohort.py) each group of equal-sized clients in one batch."""
        if self.cohort is None:
            for i, k in enumerate(clients):
                loss, n = self.train_client(down, k, r, lr, None if states is None else states[i])
                yield self.up.flat, loss, n
            return
        yield from self.cohort.train(down, clients, r, lr, states)

    def train_client(self, down: torch.Tensor, k: int, r: int, lr: float,
                     client_state: torch.Tensor | None = None) -> tuple[float, int]:
        """Client k's E local epochs from the global payload `down` (or just Theta, for a rule without down
        payloads); its model is left in the module and, with the up payloads, in self.up. `client_state`
        (flat) is read before and written after. Returns (mean loss, n_k)."""
        if down is not self.down.flat:
            self.down.flat.copy_(down)
        self.state.write(self.down.theta)
        params = self.state.trainable
        self._algo_state = {**self.algorithm.init_trainer_state(params), **self.shared}
        if client_state is not None:
            self.layout.unpack(client_state, self._algo_state)
        self.head.begin(k, None if client_state is None else self.layout.rows(client_state))
        self.up.flat.zero_()
        self.client = k
        plan = self.objective.begin_round(r, lr)
        self._round = LocalRound(lr=lr, K=plan.steps, global_params=views(self.down.trainable, params),
                                 down=self.down.as_params(params), up=self.up.as_params(params))
        losses = []
        for step in range(plan.steps):
            x, y = next(plan.batches)
            self._round.step, self._round.lr = step, self.objective.lr(step)
            losses.append(self.step(x.to(self.device), y.to(self.device)))
        with torch.no_grad():
            self.algorithm.end_round(params, self._round, self._algo_state)
            if client_state is not None:
                self.layout.pack(self._algo_state, out=client_state)
        self.objective.end_round(r)
        self.head.end(None if client_state is None else self.layout.rows(client_state))
        self.state.read(self.up.theta)
        return float(torch.stack(losses).mean()), len(self.data.parts[k])

    def client_rounds(self, start_round: int):
        """The objective's view of a client's round (PartyTraining.rounds): the batches and steps of the client
        being trained (`client`)."""
        return lambda r: RoundData(self.batches(self.client, r), self.steps(len(self.data.parts[self.client])))

    def steps(self, n: int) -> int:
        """Local steps of a client of n images: E epochs of ceil(n / B) batches."""
        return self.epochs * -(-n // self.batch_size)

    def batches(self, k: int, r: int):
        """Client k's batches of round r, (x, y) on the CPU: each epoch a permutation of its images from the
        client's own generator (client_seed), which the augmentation then draws from too."""
        generator = torch.Generator().manual_seed(client_seed(self.seed, r, k))
        index = self.data.parts[k]
        for _ in range(self.epochs):
            order = index[torch.randperm(len(index), generator=generator).numpy()]
            for start in range(0, len(order), self.batch_size):
                yield self.data.batch(order[start:start + self.batch_size], generator, self.augment, self.dtype)

    def new_global(self, previous: torch.Tensor, lr: float) -> None:
        """The next global payload arrived in self.down (`previous`: Theta before it): the rule rebuilds its
        global_state (PFM's M, eq. 6), as a silo trainer does."""
        n = self.state.n_trainable
        self.algorithm.on_global(previous[:n], self.down.trainable, lr, self.shared)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        f = self.model(x)
        loss = self.objective.loss(x, f, y, self.head.loss(f, y))
        loss.backward()
        params = self.state.trainable
        with torch.no_grad():
            self.algorithm.local_step(params, [p.grad for p in params], self._round, self._algo_state)
        self.head.step(self._round.lr)
        for p in params:
            p.grad = None
        return loss.detach().to(torch.float64)
