"""The cross-device round in one process, as the reference the mpirun runs are held to: every sampled client
trained from the global payload with its state from the server's store, each upload [theta_k | up payloads]
kept, then the server's own step (ServerStep: sum_k n_k u_k / sum_k n_k, as the exchange's reduction gives it,
then the rule's server update; a robust rule reads every upload) and on_global on the trainer. With fed.dp each client's update is clipped and
counted once, and the server's aggregator adds the noise, as in a run."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from fedmpi.aggregation.dp import clip_into
from fedmpi.aggregation.server_step import ServerStep
from fedmpi.config import load_config
from fedmpi.core.build import build_parts
from fedmpi.crossdevice.client_data import open_client_data
from fedmpi.crossdevice.client_state import ClientStore, client_store
from fedmpi.crossdevice.local_training import LocalTrainer
from fedmpi.crossdevice.sampler import ClientSampler
from fedmpi.core.payloads import Payloads

CONFIG = "configs/hsu_cifar10.yaml"
CPU = torch.device("cpu")


class SampledUploads:
    """A round's client uploads [theta_k | up payloads] with their example counts; the weighted mean is what the
    cross-device exchange's reduction gives (its weights are the counts, not w). `rows`: every upload, in the
    order of the sampled clients, for an aggregator that reads them (a robust rule), with `weights` n_k / sum n."""

    gives_uploads = True

    def __init__(self, uploads: list[tuple[int, torch.Tensor]], dtype):
        self.uploads = uploads
        self.rows = torch.stack([u for _, u in uploads]).to(dtype)
        sizes = torch.tensor([float(size) for size, _ in uploads], dtype=torch.float64)
        self.weights = sizes / sizes.sum()

    def weighted_mean(self, w, out: torch.Tensor) -> torch.Tensor:
        return out.copy_(sum(size * u for size, u in self.uploads) / sum(size for size, _ in self.uploads))


@dataclass
class Simulation:
    theta: torch.Tensor                 # the final global model
    sampled: list[list[int]]            # each round's clients
    server_state: dict                  # the rule's server state
    store: ClientStore | None           # the clients' states
    local: LocalTrainer
    last_rows: torch.Tensor | None = None    # the last round's uploads, one row per sampled client
    losses: list[float] | None = None        # each round's n_k-weighted mean loss of its clients


def simulate(overrides: list[str], config: str = CONFIG, dtype=torch.float64) -> Simulation:
    cfg = load_config(config, overrides)
    data = open_client_data(cfg)
    parts = build_parts(cfg, CPU, dtype)
    model, state, algorithm = parts.model, parts.state, parts.rule
    down, mean = Payloads(state, algorithm.down, CPU, dtype), Payloads(state, algorithm.up, CPU, dtype)
    state.read(down.theta)
    server_state = algorithm.init_server_state(down.trainable, down.extra)
    step = ServerStep(algorithm, parts.aggregator, down, mean, server_state, state.n_trainable)
    clip = cfg.fed.dp.clip if cfg.fed.dp.enabled else None
    store = client_store(algorithm, state.trainable)
    local = LocalTrainer(model, state, algorithm, data, epochs=cfg.clients.epochs, batch_size=cfg.optim.batch_size,
                         seed=cfg.run.seed, augment=False, device=CPU, dtype=dtype)
    population = len(data.parts)
    sampler = ClientSampler(population, cfg.clients.fraction if population > 1 else 1.0, cfg.clients.sampler_seed)
    sampled, losses = [], []
    for r in range(cfg.rounds):
        ids = [int(k) for k in sampler.sample()]
        sampled.append(ids)
        uploads, round_losses = [], []
        for k in ids:
            client = store.get(k).clone() if store else None
            loss, size = local.train_client(down.flat, k, r, cfg.lr_at_round(r), client)
            round_losses.append((loss, size))
            if clip is None:
                uploads.append((size, local.up.flat.to(torch.float64).clone()))
            else:               # DP: each client clipped and counted once
                clipped = torch.zeros(local.up.flat.numel(), dtype=torch.float64)
                clip_into(clipped, local.up.flat, down.theta, clip)
                uploads.append((1, clipped))
            if store:
                store.put(k, client)
        losses.append(sum(loss * n for loss, n in round_losses) / sum(n for _, n in round_losses))
        previous = down.theta.clone()
        sampled_uploads = SampledUploads(uploads, dtype)
        w = sampled_uploads.weights if step.aggregator.needs_uploads else None
        step(sampled_uploads, w, participation=len(ids) / population)
        local.down.flat.copy_(down.flat)
        local.new_global(previous, cfg.lr_at_round(r))
    rows = sampled_uploads.rows if cfg.rounds else None
    return Simulation(down.theta.clone(), sampled, server_state, store, local, rows, losses)
