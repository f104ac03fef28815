"""Cross-device runs under mpirun (configs/hsu_cifar10.yaml shrunk by overrides): the reduction over trainer
ranks equals gathering every client's model and averaging, on 1, 2 and 3 trainer ranks, for FedAvg and FedAvgM
(float64, 1e-9), and so do SCAFFOLD (client states shipped by the server), MIME-lite (extra payloads) and PFM
(M rebuilt on every trainer rank), which resume bitwise from a checkpoint, and SCAFFOLD with each rank's clients
trained as one batch (clients.cohort=vectorised); a run's test accuracy rises, its evaluation shared by the
server and the trainer ranks logs the one-rank evaluation's numbers exactly, and the run resumed from a
checkpoint ends the same."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from crossdevice_harness import CONFIG, simulate
from fedmpi.config import load_config
from fedmpi.core.build import build_parts
from fedmpi.crossdevice.client_data import open_client_data
from fedmpi.crossdevice.evaluation import test_accuracy as one_rank_accuracy
from fedmpi.store.checkpoint import read_part, round_folder_name
from fedmpi.store.h5log import LogReader
from jobs.mpirun import mpirun

TINY = ["clients.population=6", "clients.images=12", "clients.train_images=80", "clients.test_images=40",
        "clients.fraction=0.5", "clients.rounds=3", "clients.alpha=0.5", "optim.batch_size=5", "optim.lr=0.05",
        "eval.every=0", "run.device=cpu", "run.deterministic=true"]   # the script sets run.dtype
ALGORITHMS = {"fedavg": ["fed.algorithm=fedavg"], "fedavgm": ["fed.algorithm=fedavgm"]}   # the script sets them


def reference(overrides) -> tuple[torch.Tensor, list]:
    """Every sampled client trained in one process, its upload kept, then sum_k n_k u_k / sum_k n_k."""
    run = simulate(overrides)
    return run.theta, run.sampled


def test_reduction_equals_gather_then_average_on_1_2_3_trainer_ranks(tmp_path):
    """FedAvg and FedAvgM on 1, 2, 3 trainer ranks (tests/support/mpi_scripts/crossdevice_reduction.py, one launch)."""
    common = [*TINY, f"data.root={tmp_path / 'data'}"]
    out = mpirun(4, ["tests/support/mpi_scripts/crossdevice_reduction.py", str(tmp_path), CONFIG, *common], timeout=400)
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
    # rules with extra payloads and trainer state; SCAFFOLD's c_i live in the server's checkpoint part
    one_step = [*common, "clients.images=5", "checkpoint.every=1", "checkpoint.keep=3"]
    for rule, extra in (("scaffold", []), ("mime_lite", []), ("pfm", ["optim.momentum=0.9"])):
        expected = simulate([*one_step, f"fed.algorithm={rule}", *extra])
        theta = torch.load(tmp_path / f"{rule}.pt")["theta"]
        assert (theta - expected.theta).abs().max() < 1e-9, rule
        if rule == "scaffold":   # the clients' c_i, kept by the server, in its checkpoint part
            saved = read_part(tmp_path / rule / "ckpt" / round_folder_name(3) / "server.h5")
            clients = saved["exchange"]["clients"]           # the exchange keeps the clients' states
            assert clients["ids"].tolist() == sorted(expected.store.states)
            stored = torch.stack([expected.store.states[k] for k in sorted(expected.store.states)])
            assert clients["values"].abs().max() > 1e-3
            assert torch.allclose(clients["values"], stored, atol=1e-9, rtol=0)
        if rule != "mime_lite":  # resumed after round 2: the clients' states (SCAFFOLD), M (PFM) restored
            assert torch.equal(torch.load(tmp_path / f"{rule}-resumed.pt")["theta"], theta), rule
        if rule == "scaffold":   # each rank's clients as one batch: the client-by-client reference, to rounding
            vectorised = torch.load(tmp_path / "scaffold-vectorised.pt")["theta"]
            assert (vectorised - expected.theta).abs().max() < 1e-9
    # float32 models, summed in float64 on the ranks: the rank count changes the float64 sum by ~1e-16
    # relative, below float32's rounding, so the global model is the same bit for bit here
    float32 = [torch.load(tmp_path / f"fedavgm-float32-{ranks}.pt")["theta"] for ranks in (1, 2, 3)]
    assert float32[0].dtype == torch.float32
    assert torch.equal(float32[0], float32[1]) and torch.equal(float32[0], float32[2])


SHRUNK = ["clients.population=10", "clients.images=100", "clients.train_images=1000", "clients.test_images=300",
          "clients.fraction=0.4", "clients.epochs=2", "clients.alpha=100", "clients.rounds=10", "optim.batch_size=20",
          "optim.lr=0.1", "eval.every=5", "eval.batch_size=40", "checkpoint.every=4", "run.device=cpu",
          "run.deterministic=true"]


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
    # the clients' training loss falls; the test loss after 10 rounds is not a stable sign of learning here (it
    # ended above its start on one machine's rounding while the accuracy rose, as 20-round runs do in docs/results)
    assert rounds["loss"][-3:].mean() < rounds["loss"][0] - 0.05, rounds["loss"]
    histogram = np.array(described["histogram"])
    assert histogram.shape == (10, 10) and (histogram.sum(1) == 100).all() and len(described["hash"]) == 16
    assert clients["ids"].shape == (10, 4) and (rounds["bytes_moved"] > 0).all()

    # the test set's 8 batches were scored by the server and the 2 trainer ranks (3, 3, 2): the logged numbers
    # are the one-rank evaluation of the final Θ, to the bit (one thread, as the ranks ran)
    cfg = load_config(CONFIG, [*SHRUNK, f"data.root={tmp_path / 'data'}"])
    parts = build_parts(cfg, torch.device("cpu"), torch.float32)
    parts.state.write(torch.load(tmp_path / "run.pt")["theta"])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one_rank = one_rank_accuracy(parts.model, open_client_data(cfg), 0, 40, torch.device("cpu"), torch.float32)
    finally:
        torch.set_num_threads(threads)
    assert (ev["test/accuracy"][-1], ev["test/loss"][-1]) == one_rank

    # the same run resumed after round 8 (its checkpoint restores Theta, FedAvgM's velocity and the sampler)
    resumed = mpirun(3, [*common, "log.name=run", "--resume", str(tmp_path / "run" / "ckpt" / "round_000008"),
                         f"run.save_final={tmp_path / 'resumed.pt'}"], timeout=400)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    assert "round 9/10" in resumed.stdout and "round 8/10" not in resumed.stdout
    assert torch.equal(torch.load(tmp_path / "resumed.pt")["theta"], torch.load(tmp_path / "run.pt")["theta"])
    with LogReader(tmp_path / "run" / "log.h5") as log:
        assert np.array_equal(log.table("clients")["ids"], clients["ids"])
