"""Face clients across devices under mpirun (configs/faces_devices.yaml shrunk), one run per method (and one recorded
round the privacy audit replays): one identity per client, the positive-only loss on the device, each client's w_c
kept by the server. From a random start every face's embedding points nearly one way (W's mean pairwise cosine about
0.9): positive-only FedAvg leaves the class embeddings there, FedAwS's spreadout and FedGC's correction (every other
client's row a negative, s = 64) on the server move them apart (the log's `classes` table, per round); all evaluate
Θ on the held-out pair sets as the silo runs do, the FedGC run the synthetic IJB-C too (eval.sets)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from docs_commands import all_commands
from fedmpi.core.progress import loss_text
from fedmpi.crossdevice.face_clients import IDLE_LOSS
from fedmpi.store.h5log import LogReader
from jobs.mpirun import mpirun
from shared_runs import SCRIPT as ONE_LAUNCH

CONFIG = "configs/faces_devices.yaml"
TINY = ["clients.population=16", "clients.faces.identities=16", "clients.faces.images_per_identity=8",
        "clients.fraction=0.5", "clients.rounds=12", "eval.every=12", "optim.lr=0.1", "run.device=cpu",
        "data.val_pairs_per_fold=10"]
METHODS = {"fedavg": ["fed.algorithm=fedavg", "fed.options={}"], "fedaws": ["fed.options.lr_scale=10"],
           "fedgc": ["fed.algorithm=fedgc", "fed.options={}", "eval.sets.ijbc=synthetic"],
           "fedaws-round": ["fed.options.lr_scale=10", "fed.options.rows=round"], "readme": [],
           # one round from the pretrained start, what its server received recorded for the privacy audit; every
           # upload kept in the mean (the upload check only warns), so that Θ_after − Θ_before is the cohort's mean
           "audited": ["fed.algorithm=fedavg", "fed.options={}", "clients.rounds=1", "eval.every=0",
                       "model.init=docs/results/faces-devices-cpu/start/init.pth", "log.record_received=[1]",
                       "fed.upload_check.action=warn"]}


def readme_command() -> list[str]:
    """The README's command for a phone per person, from `python` on: what the user is shown."""
    shown = [c.words for c in all_commands() if c.where.startswith("README.md") and CONFIG in c.words]
    assert len(shown) == 1 and shown[0][:3] == ("mpirun", "-n", "3"), shown
    return list(shown[0][shown[0].index("python") + 1:])


def launch(tmp_path) -> dict:
    """Every method's run in one launch (one start-up of the ranks for all): {name: (stdout, classes, eval, rounds,
    clients)}."""
    plan = {}
    for name in METHODS:
        command = readme_command() if name == "readme" else ["-m", "fedmpi.run", "--config", CONFIG]
        assert command[:2] == ["-m", "fedmpi.run"], command
        plan[name] = [*command[2:], *TINY, *METHODS[name], f"data.root={tmp_path / 'data'}", f"log.dir={tmp_path}",
                      f"log.name={name}"]
    (tmp_path / "plan.json").write_text(json.dumps(list(plan.values())))
    out = mpirun(3, [str(ONE_LAUNCH), str(tmp_path / "plan.json")], timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    printed = out.stdout.split("=== fedmpi.run ")[1:]
    assert len(printed) == len(plan), out.stdout[-2000:]
    runs = {}
    for name, stdout in zip(plan, printed):
        with LogReader(tmp_path / name / "log.h5") as log:
            runs[name] = (stdout, log.table("classes"), log.table("eval"), log.table("rounds"),
                          json.loads(log.f["data"].attrs["clients"]))
    return runs


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("faces")


@pytest.fixture(scope="module")
def runs(folder):
    return launch(folder)


def test_positive_only_fedavg_draws_the_class_embeddings_together_and_fedaws_keeps_them_apart(runs):
    avg, aws = runs["fedavg"][1]["mean_cosine"], runs["fedaws"][1]["mean_cosine"]
    assert len(avg) == len(aws) == 12 and runs["fedaws"][1]["clients_seen"][-1] == 16
    assert (avg > 0.85).all() and aws[-1] < aws[0] - 0.1 and aws[-1] < avg[-1] - 0.2, (avg, aws)
    assert (runs["fedaws"][1]["spreadout"] > 0).all() and "spreadout" not in runs["fedavg"][1]


def test_fedgcs_correction_across_devices_pushes_every_clients_row_from_the_others(runs):
    stdout, classes, ev, _, _ = runs["fedgc"]
    gc, avg = classes["mean_cosine"], runs["fedavg"][1]["mean_cosine"]
    assert classes["clients_seen"][-1] == 16 and (classes["reg"] > 0).all() and "reg" not in runs["fedavg"][1]
    # at s = 64 the correction acts where rows nearly coincide (q ≈ e^{-s(1 - cos)}): round 1's step already takes
    # them from FedAvg's ~0.89 to below 0.8, where it all but stops
    assert (gc < 0.8).all() and (gc < avg - 0.1).all(), (gc, avg)
    assert "held-out accuracy % lfw" in stdout and np.isfinite(ev["lfw/accuracy"]).all()


def test_a_device_run_evaluates_the_synthetic_ijbc_into_the_silos_columns(runs):
    stdout, _, ev, _, _ = runs["fedgc"]
    tar = [k for k in ev if k.startswith("ijbc/tar_far_")]
    assert "ijbc/tar_far_1e-4" in tar and ev["round"].tolist() == [0, 11]
    assert all(np.isfinite(ev[k]).all() and ((0 <= ev[k]) & (ev[k] <= 1)).all() for k in tar)
    said = [line for line in stdout.splitlines() if line.startswith("eval after round")]
    assert len(said) == 2 and all("; ijbc tar_far_1e-5 " in line for line in said), said
    assert "ijbc/tar_far_1e-4" not in runs["fedaws"][2]


def test_a_face_client_run_evaluates_the_pair_sets_and_counts_w_c_in_its_bytes(runs):
    stdout, _, ev, rounds, clients = runs["fedaws"]
    assert "held-out accuracy % lfw" in stdout and ev["round"].tolist() == [0, 11]
    assert np.isfinite(ev["lfw/accuracy"]).all() and clients["identities_per_client"] == 1
    assert clients["population"] == 16 and clients["images"] == 16 * 8
    # 8 clients a round, each w_c (128 float32 values) down and back up beside the two ranks' payloads
    assert runs["fedaws"][3]["bytes_up"][0] - runs["fedavg"][3]["bytes_up"][0] == 0
    assert (rounds["bytes_up"] >= 8 * 128 * 4).all()


def test_fedaws_on_the_rounds_rows_keeps_them_apart_too(runs):
    """fed.options.rows=round (the cross-device default; the config is Aggarwal's every row): each round only the
    cohort's rows move, against all of W; the rows still spread where positive-only FedAvg's stay together."""
    avg, aws = runs["fedavg"][1]["mean_cosine"], runs["fedaws-round"][1]["mean_cosine"]
    assert (runs["fedaws-round"][1]["spreadout"] > 0).all() and runs["fedaws-round"][1]["clients_seen"][-1] == 16
    assert aws[-1] < aws[0] - 0.1 and aws[-1] < avg[-1] - 0.2, (avg, aws)


def round_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("round ") and "/12  loss clients " in line]


def test_a_run_whose_rows_already_meet_nu_pos_says_so_once_and_prints_the_loss_with_its_digits(runs):
    """From a random start (positive-only FedAvg here) every face points nearly one way, so each w_c meets ν_pos
    from round 1: the loss is ~0, said once in one line, and each round line prints it with its digits."""
    stdout, _, _, rounds, _ = runs["fedavg"]
    loss = rounds["loss"][:, 0]
    assert loss[0] < IDLE_LOSS, loss
    said = [line for line in stdout.splitlines() if line.startswith("clients' loss ")]
    assert len(said) == 1 and said[0].startswith(f"clients' loss {loss_text(loss[0])} at round 1: the class rows "
                                                 f"already meet ν_pos = 0.9 under this start"), said
    lines = round_lines(stdout)
    assert len(lines) == 12 and all(f"loss clients {loss_text(x)}  " in line for x, line in zip(loss, lines))
    assert not any("loss clients 0.000" in line for line in lines)


def test_the_readmes_command_for_a_phone_per_person_trains(runs):
    """The README's command, shrunk as the others here: from its start the clients have something to learn (their
    loss above the idle line's 10⁻³ every round and over 10 times the median of positive-only FedAvg's from a
    random start, no line saying it is ~0, and falling as the clients' 10 local steps a round train: the mean of
    the last three rounds below the first three's) and W's rows start apart (mean cosine below 0.3 every round,
    against above 0.85 from a random start). The held-out accuracy is not held to rise: 12 rounds of 8 clients
    move it within its folds' noise."""
    stdout, classes, _, rounds, _ = runs["readme"]
    assert "model.init=" in " ".join(readme_command())
    loss, idle = rounds["loss"][:, 0], runs["fedavg"][3]["loss"][:, 0]
    assert (loss > IDLE_LOSS).all() and loss.min() > 10 * np.median(idle), (loss, idle)
    assert "clients' loss " not in stdout
    assert loss[-3:].mean() < loss[:3].mean(), loss
    cosine = classes["mean_cosine"]
    assert (cosine < 0.3).all() and (runs["fedavg"][1]["mean_cosine"] > 0.85).all(), cosine
    lines = round_lines(stdout)
    assert len(lines) == 12 and all(f"loss clients {loss_text(x)}  " in line for x, line in zip(rounds["loss"][:, 0],
                                                                                                 lines))


def simulated_from_the_truth(run, name: str) -> tuple:
    """(the recorded upload θ_c − Θ of `name`, the audit's simulation of the client's round from its true images
    and its true first w_c: the normalised sum of its unit features under the start, Θ of round 1)."""
    import torch

    from fedmpi.audit.client_update import client_plan, client_simulation
    from fedmpi.audit.local_rules import local_step
    from fedmpi.audit.run_view import client_images, model_at, open_round
    from fedmpi.crossdevice.client_data import open_clients
    from fedmpi.crossdevice.client_heads import client_head
    from fedmpi.models.frozen_batch_norm import BatchNormMode

    view = open_round(run, 1)
    cfg, received, k = view.cfg, view.received, int(name.split()[-1])
    theta, n = received["theta_before"], received["n_trainable"]
    start, _ = model_at(cfg, theta)
    first = client_head(cfg, start, open_clients(cfg)).first_rows(k, torch.zeros(1, cfg.model.embedding_size))
    [(images, _)] = client_images(cfg, [k])
    model, _ = model_at(cfg, theta)
    BatchNormMode(model.train(), frozen=True).apply()
    plan = client_plan(cfg.run.seed, cfg.clients.epochs, cfg.optim.batch_size, cfg.clients.augment, k, 0, len(images))
    simulated = client_simulation(model, plan, len(images), cfg.lr_at_round(0), local_step(view, model, len(plan)),
                                  cfg.clients.positive_margin, first)(images)
    upload = received["uploads"][received["upload_names"].index(name), :n] - theta[:n]
    return upload, torch.cat([s.detach().reshape(-1) for s in simulated])


def test_the_audit_replays_a_device_clients_round_and_inverts_its_upload(runs, folder, tmp_path):
    """The audit's simulation of a client's local training, from its true images and w_c, is the upload the
    server recorded (float32's precision), and the n_c-weighted sum of the cohort's is Θ_after − Θ_before;
    `tools.audit --client` inverts two clients' uploads apart, `--upload aggregate` the cohort's sum."""
    import h5py
    import torch

    from tools.audit import main

    run = folder / "audited"
    with h5py.File(run / "received" / "round-1.h5") as f:
        names = [str(n) for n in f.attrs["upload_names"]]
        aggregate = torch.from_numpy(f["theta_after"][:] - f["theta_before"][:])
    assert len(names) == 8
    replayed = [simulated_from_the_truth(run, name) for name in names]
    for name, (upload, simulated) in zip(names, replayed):
        torch.testing.assert_close(simulated, upload, rtol=0, atol=1e-6, msg=name)
    assert max(float(upload.abs().max()) for upload, _ in replayed) > 1e-3     # the pretrained start: clients learn
    sizes = 8.0 * len(names)                                                   # 8 images a client
    mean = sum(8.0 / sizes * simulated for _, simulated in replayed)
    torch.testing.assert_close(mean, aggregate[:len(mean)], rtol=0, atol=1e-6)
    clients = [int(n.split()[-1]) for n in names[:2]]
    assert main([str(run), "--round", "1", "--client", *map(str, clients), "--iterations", "2",
                 "--out", str(tmp_path / "two")]) == 0
    result = json.loads((tmp_path / "two" / "audit.json").read_text())["inversion"]
    assert result["target"] == "clients" and result["clients"] == clients and result["reconstruction"]["count"] == 16
    assert sorted(result["identity"]["per_client"]) == sorted(map(str, clients)) and result["participants"] == 1
    assert main([str(run), "--round", "1", "--upload", "aggregate", "--iterations", "2",
                 "--out", str(tmp_path / "sum")]) == 0
    result = json.loads((tmp_path / "sum" / "audit.json").read_text())["inversion"]
    assert result["target"] == "cohort" and result["participants"] == 8 and result["reconstruction"]["count"] == 64
