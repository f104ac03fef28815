"""Update inversion of a device client's upload θ_c − Θ, its local training simulated as the client ran it
(crossdevice/local_training.py, Yu et al. 2020's clients): E epochs over its n_c images in batches of B, each
epoch's order and each image's horizontal flip drawn from the client's own generator, client_seed(run.seed, r, c)
(public, as the config is: the plan below replays the trainer's own draws); the positive-only loss
(max(0, ν − ŵ_c·f̂(x)))² (models/positive_only.py) with w_c trained beside θ by plain SGD at lr; the rule's local
step (local_rules.py). The server knows n_c (it weighs the upload by it) but not the images, nor w_c at the
round's start (the client derives it from its own images in its first round; the recording holds no W): the
attack optimises a surrogate w_c beside the images."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from fedmpi.models.positive_only import positive_loss

from .inversion import Inversion, invert, local_update_of


class _Positions:
    """A face set whose image i flipped or not reads as (i, flip): the trainer's batches then name positions."""

    def __getitem__(self, index):
        i, flip = index
        return torch.tensor([int(i), int(flip)]), 0


def client_plan(seed: int, epochs: int, batch_size: int, augment: bool, client: int, r: int, n: int) -> list:
    """Client `client`'s batches of round r (from 0) as the trainer draws them: per local step a tensor [b, 2]
    of (position among its n images, flipped)."""
    from fedmpi.crossdevice.face_clients import FaceClients
    from fedmpi.crossdevice.local_training import LocalTrainer

    data = FaceClients(_Positions(), {client: np.arange(n)}, 1, {})
    trainer = SimpleNamespace(seed=seed, epochs=epochs, batch_size=batch_size, augment=augment, data=data,
                              dtype=torch.int64)
    return [x for x, _ in LocalTrainer.batches(trainer, client, r)]


def client_simulation(model: torch.nn.Module, plan: list, n: int, lr: float, step, nu: float,
                      rows: torch.Tensor):
    """x′ [n, C, H, W] -> θ_c − Θ after the client's local steps, w_c starting at `rows` [1, d]; `model` holds Θ
    with its BatchNorm layers as the client trains them (frozen or not)."""
    picks = [b[:, 0] + n * b[:, 1] for b in plan]       # into [x′, x′ mirrored]
    labels = torch.zeros(2 * n, dtype=torch.int64)
    inner = local_update_of(model, lambda out, y, w: positive_loss(w, out, y, nu), labels, lr, len(picks), picks,
                            step.momentum, weight_decay=step.weight_decay, correct=step.correct, head=[rows])
    return lambda x: inner(torch.cat([x, x.flip(-1)]))


def invert_cohort_update(model: torch.nn.Module, observed: list, plans: list, sizes: list, weights: list,
                         image_shape, embedding: int, *, lr: float, steps: list, nu: float, iterations: int,
                         restarts: int, seed: int = 0, tv: float = 1e-4) -> Inversion:
    """Reconstructions [Σ n_c, *image_shape] of the images behind Σ_c weights[c]·(θ_c − Θ) (one client: its own
    upload, weight 1), each client c's training simulated from its plan and its local step `steps[c]`, every
    client's w_c a surrogate (`embedding` values) optimised beside the images."""
    generator = torch.Generator().manual_seed(seed)
    rows = [torch.randn(1, embedding, generator=generator, dtype=observed[0].dtype) for _ in plans]
    simulations = [client_simulation(model, plan, n, lr, step, nu, w)
                   for plan, n, step, w in zip(plans, sizes, steps, rows)]
    bounds = np.cumsum([0, *sizes])

    def simulate(x: torch.Tensor) -> list:
        total = None
        for c, (simulation, weight) in enumerate(zip(simulations, weights)):
            update = simulation(x[bounds[c]:bounds[c + 1]])
            total = [weight * u for u in update] if total is None else [t + weight * u for t, u in zip(total, update)]
        return total
    return invert(simulate, observed, (int(bounds[-1]), *image_shape), iterations=iterations, restarts=restarts,
                  tv=tv, data_range=(-1.0, 1.0), seed=seed, unknowns=rows)
