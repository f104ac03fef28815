"""The method's local training builds the clients' objective across devices, as it builds a silo party's
(algorithms/objective.py): the device trainer takes each step's loss from it, and each client's local epochs are
one round of it (crossdevice/local_training.py)."""
from __future__ import annotations

import torch

from crossdevice_harness import CONFIG
from fedmpi.algorithms.objective import LocalObjective, LocalTraining
from fedmpi.config import load_config
from fedmpi.core.build import build_parts
from fedmpi.crossdevice.client_data import open_client_data
from fedmpi.crossdevice.local_training import LocalTrainer

CPU = torch.device("cpu")
SMALL = ["clients.population=6", "clients.images=8", "clients.train_images=60", "clients.test_images=20",
         "clients.alpha=0.5", "optim.batch_size=4", "clients.epochs=2", "eval.every=0", "run.device=cpu",
         "fed.algorithm=fedavg", "optim.weight_decay=0"]
CLIENTS = [0, 3, 5]


class Halved(LocalObjective):
    """Half the head's loss: plain SGD at lr then moves θ exactly as the default at lr / 2 (a power of two)."""
    rounds: list = []

    def begin_round(self, r: int, lr: float):
        plan = super().begin_round(r, lr)
        Halved.rounds.append((r, plan.steps))
        return plan

    def loss(self, images, f, labels, head):
        return 0.5 * head


class HalvedTraining(LocalTraining):
    @staticmethod
    def objective(options, party) -> LocalObjective:
        return Halved(options, party)


def one_round(tmp_path, lr: float, training=None):
    cfg = load_config(CONFIG, [*SMALL, f"data.root={tmp_path}"])
    parts = build_parts(cfg, CPU, torch.float64)
    if training is not None:
        parts.rule.training = training
    data = open_client_data(cfg)
    local = LocalTrainer(parts.model, parts.state, parts.rule, data, epochs=cfg.clients.epochs,
                         batch_size=cfg.optim.batch_size, seed=3, augment=False, device=CPU, dtype=torch.float64)
    payload, stats = local.train_round(local.down.flat, CLIENTS, 1, lr)
    return payload, stats, [local.steps(len(data.parts[k])) for k in CLIENTS]


def test_the_device_trainer_steps_on_the_methods_local_objective(tmp_path):
    Halved.rounds.clear()
    halved, halved_stats, steps = one_round(tmp_path, 0.05, HalvedTraining)
    default, default_stats, _ = one_round(tmp_path, 0.025)
    assert Halved.rounds == [(1, n) for n in steps]        # one round of the objective per client, E epochs each
    assert torch.equal(halved, default)
    assert halved_stats["loss_sum"] == 0.5 * default_stats["loss_sum"]
