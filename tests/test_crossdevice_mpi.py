"""Cross-device runs under mpirun (configs/hsu_cifar10.yaml shrunk by overrides): the reduction over trainer
ranks equals gathering every client's model and averaging, on 1, 2 and 3 trainer ranks, for FedAvg and FedAvgM
(float64, 1e-9); a run's test accuracy rises, and the run resumed from a checkpoint ends the same."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fedmpi.algorithms import build_algorithm
from fedmpi.config import load_config
from fedmpi.crossdevice.client_data import open_client_data
from fedmpi.crossdevice.local_training import LocalTrainer
from fedmpi.crossdevice.model import build_client_model
from fedmpi.crossdevice.sampler import ClientSampler
from fedmpi.roles.context import BackboneState
from fedmpi.store.h5log import LogReader
from mpirun import mpirun

CONFIG = "configs/hsu_cifar10.yaml"
TINY = ["clients.population=6", "clients.images=12", "clients.train_images=80", "clients.test_images=40",
        "clients.fraction=0.5", "clients.rounds=3", "clients.alpha=0.5", "optim.batch_size=5", "optim.lr=0.05",
        "eval.every=0", "run.device=cpu", "run.deterministic=true"]   # the script sets run.dtype
ALGORITHMS = {"fedavg": ["fed.algorithm=fedavg"], "fedavgm": ["fed.algorithm=fedavgm"]}   # the script sets them


def reference(overrides) -> tuple[torch.Tensor, list]:
    """Every sampled client trained in one process, its model kept, then sum_k n_k theta_k / sum_k n_k."""
    cfg = load_config(CONFIG, overrides)
    data = open_client_data(cfg)
    model = build_client_model(cfg, torch.device("cpu"), torch.float64)
    state = BackboneState(model)
    theta = state.read()
    algorithm = build_algorithm(cfg)
    server_state = algorithm.init_server_state(theta, {})
    local = LocalTrainer(model, state, algorithm, data, epochs=1, batch_size=cfg.optim.batch_size,
                         seed=cfg.run.seed, augment=False, device=torch.device("cpu"), dtype=torch.float64)
    sampler = ClientSampler(len(data.parts), cfg.clients.fraction, cfg.clients.sampler_seed)
    sampled = []
    for r in range(cfg.rounds):
        ids = sampler.sample()
        sampled.append(ids.tolist())
        gathered = []
        for k in ids:
            _, n = local.train_client(theta, int(k), r, cfg.optim.lr)
            gathered.append((n, state.read().clone()))
        average = sum(n * t for n, t in gathered) / sum(n for n, _ in gathered)
        algorithm.server_update(theta, {"theta": average}, server_state, participation=len(ids) / len(data.parts))
    return theta, sampled


def test_reduction_equals_gather_then_average_on_1_2_3_trainer_ranks(tmp_path):
    """FedAvg and FedAvgM on 1, 2, 3 trainer ranks (tests/mpi_scripts/crossdevice_reduction.py, one launch)."""
    common = [*TINY, f"data.root={tmp_path / 'data'}"]
    out = mpirun(4, ["tests/mpi_scripts/crossdevice_reduction.py", str(tmp_path), CONFIG, *common], timeout=400)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    for algorithm, extra in ALGORITHMS.items():
        expected, sampled = reference([*common, *extra])
        assert sum(len(ids) for ids in sampled) == 9
        for ranks in (1, 2, 3):
            theta = torch.load(tmp_path / f"{algorithm}-float64-{ranks}.pt")["theta"]
            assert theta.dtype == torch.float64
            error = (theta - expected).abs().max().item()
            assert error < 1e-9, (algorithm, ranks, error)
            with LogReader(tmp_path / f"{algorithm}-float64-{ranks}" / "log.h5") as log:
                assert log.table("clients")["ids"].tolist() == sampled
        assert (expected - reference([*common, *extra])[0]).abs().max() == 0  # the reference is reproducible
    # float32 models, summed in float64 on the ranks: the rank count changes the float64 sum by ~1e-16
    # relative, below float32's rounding, so the global model is the same bit for bit here
    float32 = [torch.load(tmp_path / f"fedavgm-float32-{ranks}.pt")["theta"] for ranks in (1, 2, 3)]
    assert float32[0].dtype == torch.float32
    assert torch.equal(float32[0], float32[1]) and torch.equal(float32[0], float32[2])


SHRUNK = ["clients.population=10", "clients.images=100", "clients.train_images=1000", "clients.test_images=300",
          "clients.fraction=0.4", "clients.epochs=2", "clients.alpha=100", "clients.rounds=10", "optim.batch_size=20",
          "optim.lr=0.1", "eval.every=5", "checkpoint.every=4", "run.device=cpu", "run.deterministic=true"]


def test_hsu_config_shrunk_accuracy_rises_and_a_resumed_run_ends_the_same(tmp_path):
    common = ["-m", "fedmpi.run", "--config", CONFIG, *SHRUNK, f"data.root={tmp_path / 'data'}", f"log.dir={tmp_path}"]
    out = mpirun(3, [*common, "log.name=run", f"run.save_final={tmp_path / 'run.pt'}"], timeout=400)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "round 10/10" in out.stdout and "test acc" in out.stdout
    with LogReader(tmp_path / "run" / "log.h5") as log:
        ev, rounds, clients = log.table("eval"), log.table("rounds"), log.table("clients")
        described = json.loads(log.f["data"].attrs["clients"])
    assert ev["round"].tolist() == [0, 4, 9]
    # chance is 0.1; 300 test images: a rise of 0.05 is 15 images, three standard deviations of chance
    assert ev["test/accuracy"][-1] > ev["test/accuracy"][0] + 0.05, ev["test/accuracy"]
    assert ev["test/loss"][-1] < ev["test/loss"][0], ev["test/loss"]
    histogram = np.array(described["histogram"])
    assert histogram.shape == (10, 10) and (histogram.sum(1) == 100).all() and len(described["hash"]) == 16
    assert clients["ids"].shape == (10, 4) and (rounds["bytes_moved"] > 0).all()

    # the same run resumed after round 8 (its checkpoint restores Theta, FedAvgM's velocity and the sampler)
    resumed = mpirun(3, [*common, "log.name=run", "--resume", str(tmp_path / "run" / "ckpt" / "round_000008"),
                         f"run.save_final={tmp_path / 'resumed.pt'}"], timeout=400)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    assert "round 9/10" in resumed.stdout and "round 8/10" not in resumed.stdout
    assert torch.equal(torch.load(tmp_path / "resumed.pt")["theta"], torch.load(tmp_path / "run.pt")["theta"])
    with LogReader(tmp_path / "run" / "log.h5") as log:
        assert np.array_equal(log.table("clients")["ids"], clients["ids"])
