"""The audit's simulation of a device client's local training (fedmpi/audit/client_update.py) is the client's own:
from the client's true images and its true w_c it gives the upload the device trainer makes
(crossdevice/local_training.py) to float precision, with flips, several local steps, momentum and weight decay."""
from __future__ import annotations

import pytest
import torch

from fedmpi.audit.client_update import client_plan, client_simulation
from fedmpi.audit.local_rules import LocalStep
from fedmpi.audit.run_view import client_images, model_at
from fedmpi.config import load_config
from fedmpi.core.build import build_parts
from fedmpi.crossdevice.client_data import open_clients
from fedmpi.crossdevice.client_heads import client_head
from fedmpi.crossdevice.local_training import LocalTrainer
from fedmpi.models.frozen_batch_norm import BatchNormMode

CPU = torch.device("cpu")
TINY = ["clients.population=4", "clients.faces.identities=4", "clients.faces.images_per_identity=5",
        "optim.batch_size=2", "clients.epochs=2", "clients.augment=true", "optim.weight_decay=0.001",
        "fed.algorithm=fedavg", "fed.options={}", "model.width=0.125", "model.embedding_size=16",
        "data.image_size=16", "run.device=cpu", "eval.every=0"]
CLIENT, ROUND, LR = 2, 3, 0.1


def test_the_simulated_client_update_is_the_trainers_upload(tmp_path):
    cfg = load_config("configs/faces_devices.yaml", [*TINY, f"data.root={tmp_path}"])
    parts = build_parts(cfg, CPU, torch.float64)
    data = open_clients(cfg)
    head = client_head(cfg, parts.model, data)
    local = LocalTrainer(parts.model, parts.state, parts.rule, data, epochs=cfg.clients.epochs,
                         batch_size=cfg.optim.batch_size, seed=cfg.run.seed, augment=True, device=CPU,
                         dtype=torch.float64, head=head)
    parts.state.read(local.down.theta)            # Θ: the run's start
    theta = local.down.theta.clone()
    state = local.layout.initial.clone()            # the client's first round: w_c from its images, under the start
    local.train_client(local.down.flat, CLIENT, ROUND, LR, state)
    n_trainable = parts.state.n_trainable
    upload = local.up.flat[:n_trainable] - theta[:n_trainable]
    rows = local.layout.rows(local.layout.initial.clone()).view(1, -1)
    first = head.first_rows(CLIENT, rows)

    [(images, identities)] = client_images(cfg, [CLIENT])
    assert len(set(identities.tolist())) == 1 and len(images) == 5
    plan = client_plan(cfg.run.seed, cfg.clients.epochs, cfg.optim.batch_size, True, CLIENT, ROUND, len(images))
    assert [len(b) for b in plan] == [2, 2, 1, 2, 2, 1] and torch.cat(plan)[:, 1].any()
    model, _ = model_at(cfg, theta)
    model.train()
    BatchNormMode(model, frozen=True).apply()
    step = LocalStep(cfg.fed.local_momentum, cfg.optim.weight_decay, None, "")
    simulated = client_simulation(model, plan, len(images), LR, step, cfg.clients.positive_margin, first)(
        images.to(torch.float64))
    torch.testing.assert_close(torch.cat([s.reshape(-1) for s in simulated]), upload, rtol=1e-9, atol=1e-12)
    assert upload.abs().max() > 1e-4


def test_the_clients_to_attack_are_named_by_number_or_all():
    from types import SimpleNamespace

    from fedmpi.audit.client_audit import attacked_clients
    from fedmpi.audit.run_view import Refused

    view = SimpleNamespace(cfg=SimpleNamespace(clients=SimpleNamespace(face_clients=True, identities_per_client=1)),
                           received={"upload_names": ["client 3", "client 5"]}, round=1)
    assert attacked_clients(view, None) == [3]
    assert attacked_clients(view, ["all"]) == [3, 5]
    assert attacked_clients(view, ["5"]) == [5]
    with pytest.raises(Refused, match=r"^--client x: name a client by its number, or all$"):
        attacked_clients(view, ["x"])
    with pytest.raises(Refused, match=r"^--client 4: round 1 holds the uploads of clients 3, 5$"):
        attacked_clients(view, ["4"])
