"""PrivacyFace on personal albums under mpirun (configs/faces_albums.yaml shrunk: 8 clients of 4 identities, 4 a
round, 1 server + 2 trainer ranks): every sampled client releases its DP cluster on the device, the server relays
the round's clusters to the next cohort (the log's `classes` table counts them), the bytes a real device sends are
θ and its cluster, and a run resumed from a checkpoint (the pool restored on the server and on every trainer rank)
ends with the same Θ bit for bit (the run and its resume in one launch, jobs/one_launch.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fedmpi.store.h5log import LogReader
from jobs.mpirun import mpirun
from jobs.one_launch import MARK

CONFIG = "configs/faces_albums.yaml"
# κ = 0, ε₁ = ε₂ = 10: a candidate with rows of the album in its cone is chosen and its noisy count
# (Laplace(0.1)) stays >= 1, so each sampled client releases its one cluster; checkpoints after rounds 2 and 4
TINY = ["clients.population=8", "clients.faces.identities=32", "clients.faces.images_per_identity=4",
        "clients.fraction=0.5", "clients.rounds=4", "eval.every=4", "optim.lr=0.1", "run.device=cpu",
        "run.deterministic=true", "fed.options.kappa=0.0", "fed.options.epsilon_select=10",
        "fed.options.epsilon_count=10", "checkpoint.every=2", "checkpoint.keep=3", "data.val_pairs_per_fold=10"]


@pytest.fixture(scope="module")
def albums(tmp_path_factory):
    """The run and its resume from the checkpoint after round 2 (into its own folder), in one launch."""
    tmp = tmp_path_factory.mktemp("albums")
    common = ["--config", CONFIG, *TINY, f"data.root={tmp / 'data'}", f"log.dir={tmp}"]
    plan = [[*common, "log.name=albums", f"run.save_final={tmp / 'final.pt'}"],
            [*common, "log.name=resumed", "--resume", str(tmp / "albums" / "ckpt" / "round_000002"),
             f"run.save_final={tmp / 'resumed.pt'}"]]
    (tmp / "plan.json").write_text(json.dumps(plan))
    out = mpirun(3, ["-m", "jobs.one_launch", str(tmp / "plan.json")], timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    printed = out.stdout.split(MARK)[1:]
    assert len(printed) == 2, out.stdout[-2000:]
    with LogReader(tmp / "albums" / "log.h5") as log:
        tables = log.table("classes"), log.table("rounds")
    return printed[0], *tables, torch.load(tmp / "final.pt")["theta"], torch.load(tmp / "resumed.pt")["theta"], \
        printed[1]


def test_every_sampled_client_releases_a_cluster_which_the_server_relays_to_the_next_cohort(albums):
    stdout, classes, rounds = albums[:3]
    assert "what leaves each client: backbone and its DP clusters (1 x 130 values" in stdout
    assert classes["round"].tolist() == [0, 1, 2, 3]
    assert classes["released"].tolist() == [4, 4, 4, 4] and classes["pool"].tolist() == [4, 4, 4, 4]
    assert (classes["left_out"] == 0).all() and np.isfinite(rounds["loss"]).all()
    # each release (ε₁ + ε₂ + ε₃, δ) = (10 + 10 + 0.5, 1e-5); the column is the client that released most
    assert np.allclose(classes["epsilon_release"], 20.5) and np.allclose(classes["delta_release"], 1e-5)
    assert (np.diff(classes["releases"]) >= 0).all() and (classes["releases"] <= classes["round"] + 1).all()
    assert np.allclose(classes["epsilon"], classes["releases"] * 20.5)
    assert classes["clients_seen"][-1] > 4 and np.isfinite(classes["mean_cosine"]).all()


def test_a_real_device_sends_theta_and_its_cluster_and_the_relay_is_counted(albums):
    classes, rounds = albums[1], albums[2]
    cluster = 130 * 4                                   # [p (128) | α | valid], float32
    theta = classes["device_bytes_up"][0] - cluster
    assert (classes["device_bytes_up"] == theta + cluster).all() and theta > 100_000
    assert (classes["device_bytes_down"] == theta + 4 * cluster).all()       # Θ and the 4 relayed clusters
    # up: the releases (4 clients) beside the reduce and the states; down: the pool (4 rows + owners) to 2 ranks
    assert (rounds["bytes_up"] >= 4 * cluster).all() and (rounds["bytes_down"] >= 2 * (4 * cluster + 4 * 8)).all()


def test_a_run_resumed_from_its_checkpoint_keeps_the_pool_and_ends_the_same(albums):
    final, resumed, stdout = albums[3], albums[4], albums[5]
    assert "round 3/4" in stdout and "round 2/4" not in stdout
    assert torch.equal(final, resumed)
