"""Rules with extra payloads or trainer state in the cross-device simulation, in one process
(tests/support/crossdevice_harness.py drives crossdevice.LocalTrainer and the client store as the ranks do):
SCAFFOLD with a single client is SGD, and its server control variate is the mean of every client's c_i under
partial participation (clients of equal size: Karimireddy et al.'s c = (1/N) sum_i c_i); MIME-lite and PFM with
one local step and every client each round are centralized momentum SGD on the union of the clients' images,
their defining property in the silo runs too."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from crossdevice_harness import CONFIG, simulate
from fedmpi.config import load_config
from fedmpi.crossdevice.client_data import open_client_data, to_tensor
from fedmpi.models.backbone import build_client_model

TINY = ["clients.train_images=80", "clients.test_images=20", "clients.alpha=0.5", "optim.lr=0.05",
        "eval.every=0", "run.device=cpu", "run.dtype=float64", "run.deterministic=true"]


def test_scaffold_with_a_single_client_is_sgd(tmp_path):
    one = [*TINY, "clients.population=1", "clients.images=10", "optim.batch_size=5", "clients.rounds=2",
           f"data.root={tmp_path}"]
    scaffold = simulate([*one, "fed.algorithm=scaffold"])
    sgd = simulate([*one, "fed.algorithm=fedavg"])
    c_i = scaffold.store.get(0)
    assert c_i.abs().max() > 1e-3                                        # c_i moved, and c followed it
    assert torch.allclose(scaffold.server_state["control"], c_i, atol=1e-15, rtol=1e-12)
    assert torch.allclose(scaffold.theta, sgd.theta, atol=1e-12, rtol=0)


def test_scaffold_server_control_variate_is_the_mean_of_all_clients(tmp_path):
    run = simulate([*TINY, "clients.population=4", "clients.images=10", "clients.fraction=0.5", "optim.batch_size=5",
                    "clients.rounds=2", "fed.algorithm=scaffold", f"data.root={tmp_path}"])
    assert all(len(ids) == 2 for ids in run.sampled) and len({k for ids in run.sampled for k in ids}) > 2
    clients = torch.stack([run.store.get(k) for k in range(4)])
    c = run.server_state["control"]
    assert c.abs().max() > 1e-3
    assert torch.allclose(c, clients.mean(0), atol=1e-12, rtol=0)


def centralized_momentum_sgd(overrides: list[str], momentum: float) -> torch.Tensor:
    """Momentum SGD (PyTorch's, with weight decay) on the union of every client's images, one step a round."""
    cfg = load_config(CONFIG, overrides)
    data = open_client_data(cfg)
    model = build_client_model(cfg, torch.device("cpu"), torch.float64)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.optim.lr, momentum=momentum, weight_decay=cfg.optim.weight_decay)
    union = np.concatenate(data.parts)
    x = to_tensor(data.train.images[union], data.mean, data.std, torch.float64)
    y = torch.from_numpy(data.train.labels[union])
    for _ in range(cfg.rounds):
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


@pytest.mark.parametrize("rule", [["fed.algorithm=mime_lite", "fed.options.momentum=0.9"],
                                  ["fed.algorithm=pfm", "optim.momentum=0.9"]], ids=["mime_lite", "pfm"])
def test_one_local_step_with_every_client_is_centralized_momentum_sgd(tmp_path, rule):
    every = [*TINY, "clients.population=2", "clients.images=5", "optim.batch_size=5", "clients.fraction=1",
             "clients.rounds=3", f"data.root={tmp_path}", *rule]
    federated = simulate(every)
    reference = centralized_momentum_sgd(every, momentum=0.9)
    assert federated.theta.numel() == reference.numel()                 # the CNN has no buffers
    assert torch.allclose(federated.theta, reference, atol=1e-9, rtol=0), (federated.theta - reference).abs().max()
