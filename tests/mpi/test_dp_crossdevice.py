"""DP-FedAvg at user level in the cross-device setting (McMahan et al. 2018): each sampled client's update is
clipped on the trainer rank that trains it and counts once; the server adds z·C/m to the mean of the m clients.
Checked in one process (a clip that never binds and no noise is FedAvg over equal clients; a clip that binds keeps
the round's step within C), then under mpirun against the one-process reference, noise included."""
import pytest
import torch

from crossdevice_harness import CONFIG, simulate
from fedmpi.aggregation.accounting import epsilon
from fedmpi.aggregation.dp import clip_into
from fedmpi.config import load_config
from fedmpi.core.state import BackboneState
from fedmpi.models.backbone import build_client_model
from fedmpi.store.h5log import LogReader
from jobs.mpirun import mpirun
from test_crossdevice_mpi import TINY
from test_robust_aggregation import assert_refused

ONE_ROUND = [*TINY, "clients.rounds=1", "fed.algorithm=fedavg", "clients.images=10"]
QUIET = ["fed.dp.enabled=true", "fed.dp.noise_multiplier=1.0e-30"]


def test_clip_into_adds_the_reference_plus_the_clipped_update():
    out = torch.full((3,), 10.0, dtype=torch.float64)
    norm = clip_into(out, torch.tensor([4.0, 1.0, 1.0]), torch.tensor([1.0, 1.0, 5.0]), clip=2.5)
    assert norm == 5.0
    assert torch.allclose(out, torch.tensor([10 + 1 + 1.5, 10 + 1, 10 + 5 - 2.0], dtype=torch.float64))


def test_a_clip_that_never_binds_without_noise_is_fedavg_over_equal_clients(tmp_path):
    data = [f"data.root={tmp_path}"]
    plain = simulate([*ONE_ROUND, *data])
    private = simulate([*ONE_ROUND, *data, *QUIET, "fed.dp.clip=1000000000.0"])
    assert (private.theta - plain.theta).abs().max() < 1e-12


def test_a_clip_that_binds_keeps_the_step_within_C(tmp_path):
    data = [f"data.root={tmp_path}"]
    model = build_client_model(load_config(CONFIG, [*ONE_ROUND, *data]), torch.device("cpu"), torch.float64)
    start = BackboneState(model).read()
    step = (simulate([*ONE_ROUND, *data]).theta - start).norm().item()
    private = (simulate([*ONE_ROUND, *data, *QUIET, f"fed.dp.clip={step / 10:.15f}"]).theta - start).norm().item()
    assert private <= step / 10 * (1 + 1e-9) and private > step / 100


def test_the_accountant_samples_clients_at_rate_m_over_M():
    """3 of 6 clients a round (q = 0.5), z = 1: epsilon 3.89, 5.38, 6.48 after rounds 1-3; a target of 6 keeps 2."""
    cfg = load_config(CONFIG, [*TINY, "fed.dp.enabled=true", "fed.dp.target_epsilon=6"])
    assert (cfg.planned_rounds, cfg.rounds) == (3, 2)
    assert epsilon(2, 1.0, 1e-5, 0.5) <= 6 < epsilon(3, 1.0, 1e-5, 0.5)
    assert epsilon(1, 1.0, 1e-5, 0.5) == pytest.approx(3.8936, abs=1e-4)


def test_adaptive_clipping_across_devices_is_refused_in_one_line():
    assert_refused([*TINY, "fed.dp.enabled=true", "fed.dp.adaptive=true", "fed.dp.count_noise=1"],
                   "fed.dp.enabled: adaptive clipping in the cross-device setting needs the trainer ranks", CONFIG)


def test_the_mpirun_run_adds_the_references_noise_and_logs_epsilon(tmp_path):
    overrides = [*TINY, "fed.algorithm=fedavg", "run.dtype=float64", "fed.dp.enabled=true", "fed.dp.clip=0.5",
                 "fed.dp.noise_multiplier=0.7", "clients.ranks=2", f"data.root={tmp_path / 'data'}"]
    out = mpirun(3, ["-m", "fedmpi.run", "--config", CONFIG, *overrides, f"log.dir={tmp_path}", "log.name=dp",
                     f"run.save_final={tmp_path / 'dp.pt'}"], timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    expected = simulate(overrides)
    theta = torch.load(tmp_path / "dp.pt")["theta"]
    assert (theta - expected.theta).abs().max() < 1e-9
    with LogReader(tmp_path / "dp" / "log.h5") as log:
        privacy, rounds = log.table("privacy"), log.table("rounds")
    # the clients' loss is their n_k-weighted mean, though DP counts each client once in the aggregate
    assert rounds["loss"][:, 0].tolist() == pytest.approx(expected.losses, rel=1e-9)
    assert privacy["epsilon"].tolist() == pytest.approx([epsilon(r, 0.7, 1e-5, 0.5) for r in (1, 2, 3)], rel=1e-12)
    assert privacy["noise_std"].tolist() == pytest.approx([0.7 * 0.5 / 3] * 3, rel=1e-12)
    assert "privacy: epsilon" in out.stdout
