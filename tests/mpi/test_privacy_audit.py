"""The privacy audit end to end: a FedAvg run of two silo parties records what its server received in round 2, a
run under secure aggregation with distributed DP its round 1 (log.record_received, both made in the session's one
launch of shared runs), and `python -m tools.audit` attacks party b's upload from the command line, the plain
run's aggregate and the secure run's sum in process: each report is written into its own folder, nothing else in
the run's, with numbers in range and the participants summed and z named; a round not recorded, an upload not in
the round, missing ground-truth data, a setting it cannot attack and, past round 1 of a run without model.init,
identity scoring without an independent model (--evaluation-model, which scores party b's upload) are refused in
one line; membership in the silo run is scored against held-out identities of its parties' styles. A FedAwS run of face clients (one identity a phone) records round 1: the class rows of
its clients re-identify their owners well above chance, and membership sets the clients sampled against those
never sampled; silo FedAwS and PrivacyFace runs record every party's rows and clusters with their senders; the
silo FedAvg run is refused both, naming what it uploads."""
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
import torch

from shared_runs import declare
from test_equivalence_mpi import K3, SMALL
from fedmpi.audit.run_view import Refused
from fedmpi.audit.update_audit import check_attackable
from fedmpi.store.log_reader import LogReader
from tools.audit import main

RECORDED = declare("audit-fedavg-k3", [*SMALL, "fed.algorithm=fedavg", *K3, "log.record_received=[2]"])
SECURE_DP = declare("audit-secagg-dp", [*SMALL, "fed.algorithm=fedavg", *K3, "fv.enabled=false",
                                        "fed.secure_aggregation.mode=secagg",
                                        "fed.secure_aggregation.clipping_range=64.0",
                                        "fed.secure_aggregation.quantization_bits=30", "fed.dp.enabled=true",
                                        "fed.dp.noise_multiplier=0.5", "fed.dp.clip=1000.0",
                                        "log.record_received=[1]"])
SILO_ROWS = declare("audit-fedaws-silo", [*SMALL, "fed.algorithm=fedaws", *K3, "log.record_received=[2]"])
# κ = 0 and n_min = 1: each party releases its one cluster a round, (0.1 + 0.1 + 0.5)-DP a release
SILO_CLUSTERS = declare("audit-privacyface-silo", [*SMALL, "fed.algorithm=privacyface", *K3, "fed.options.kappa=0.0",
                                                   "fed.options.min_count=1", "log.record_received=[2]"])
# 16 one-identity phones, 8 a round on 3 trainer ranks (the shared launch's world of 4)
PHONES = declare("audit-fedaws-phones", [
    "--config", "configs/faces_devices.yaml", "clients.population=16", "clients.faces.identities=16",
    "clients.faces.images_per_identity=8", "clients.fraction=0.5", "clients.rounds=2", "clients.ranks=3",
    "eval.every=0", "optim.lr=0.1", "run.device=cpu", "fed.options.lr_scale=10", "log.record_received=[1]"])


def audit(*args):
    return subprocess.run([sys.executable, "-m", "tools.audit", *map(str, args)], capture_output=True, text=True,
                          timeout=600)


def independent_model(run, folder: Path) -> Path:
    """A backbone of the run's configuration that trained on nothing (seed 1), as --evaluation-model's file."""
    from fedmpi.audit.run_view import run_config
    from fedmpi.models.backbone import build_backbone

    path = folder / "independent.pth"
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(build_backbone(run_config(run), torch.device("cpu"), torch.float32, seed=1).state_dict(), path)
    return path


def test_the_recording_holds_each_upload_and_the_model_the_run_ended_with(shared_runs):
    run = shared_runs[RECORDED]
    with h5py.File(run / "received" / "round-2.h5") as f:
        uploads, after = torch.from_numpy(f["uploads"][:]), torch.from_numpy(f["theta_after"][:])
        assert list(f.attrs["upload_names"]) == ["a", "b"] and uploads.shape == (2, f.attrs["up_numel"])
    assert torch.equal(after, torch.load(f"{run}.pt")["theta"])       # round 2 is the run's last
    assert not torch.equal(uploads[0], uploads[1])


def test_the_audit_reports_into_its_own_folder(shared_runs, tmp_path):
    run = shared_runs[RECORDED]
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    independent = independent_model(run, tmp_path / "model")
    done = audit(run, "--round", 2, "--party", "b", "--iterations", 5, "--evaluation-model", independent,
                 "--out", tmp_path / "report")
    assert done.returncode == 0, done.stderr
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == ["audit.json", "audit.md",
                                                                       "reconstructions.png"]
    report = json.loads((tmp_path / "report" / "audit.json").read_text())
    inversion, identity = report["inversion"]["reconstruction"], report["inversion"]["identity"]
    assert report["inversion"]["upload"] == "b" and inversion["count"] == 8 and len(inversion["psnr"]) == 8
    assert 0 < inversion["psnr_mean"] < 60 and -1 <= inversion["ssim_mean"] <= 1
    assert 0 <= identity["recovered"] <= 1 and 0 <= identity["chance"] <= 1
    assert identity["model"] == f"{independent} (--evaluation-model)"
    assert "identity recovered at FAR 0.01" in (tmp_path / "report" / "audit.md").read_text()


@pytest.mark.parametrize("args, message", [
    (["--round", 1], r"round 1 was not recorded: \S+ holds rounds \[2\] \(record it with log.record_received=\[1\]\)"),
    (["--round", 2, "--party", "c"], r"--party c: round 2 holds the uploads of a, b"),
    (["--round", 2], r"round 2: Θ before it trained on the participants' data and the run has no model.init to "
                     r"score identity with: name an independent model by --evaluation-model PATH"),
    (["--round", 2, "--data-root", "/nonexistent"],
     r"the ground truth of party a is missing \(data.root=/nonexistent\): /nonexistent/synthetic-ms1m-\w+ not found$"),
])
def test_bad_input_is_refused_in_one_line(shared_runs, tmp_path, capsys, args, message):
    """tools.audit's main in this process (its exit status is the command's: the command's own process runs in
    test_the_audit_reports_into_its_own_folder; each start pays an import of torch)."""
    capsys.readouterr()
    assert main([str(a) for a in (shared_runs[RECORDED], *args, "--out", tmp_path / "report")]) == 2
    assert not (tmp_path / "report").exists()
    stderr = capsys.readouterr().err
    assert len(stderr.strip().splitlines()) == 1
    assert re.match(f"audit: {message}", stderr.strip()), stderr
    assert not Path("/nonexistent").exists()      # the audit generates no data


def inversion_in_process(run, out, *args) -> dict:
    assert main([str(run), *map(str, args), "--iterations", "3", "--out", str(out)]) == 0
    return json.loads((out / "audit.json").read_text())["inversion"]


def test_the_sum_under_secure_aggregation_and_distributed_dp_is_attacked(shared_runs, tmp_path, capsys):
    run = shared_runs[SECURE_DP]
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    result = inversion_in_process(run, tmp_path / "report", "--round", 1)
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before
    assert result["target"] == "aggregate" and result["participants"] == 2
    assert result["dp"] == "distributed" and result["noise_multiplier"] == 0.5
    assert result["reconstruction"]["count"] == 24 and len(result["reconstruction"]["psnr"]) == 24   # 16 + 8
    assert "only the sum of the uploads (secure aggregation)" in result["received"]
    assert "| participants summed | 2 |" in (tmp_path / "report" / "audit.md").read_text()
    assert main([str(run), "--round", "1", "--upload", "one", "--out", str(tmp_path / "no")]) == 2
    assert not (tmp_path / "no").exists()
    assert capsys.readouterr().err.strip() == ("audit: --upload one: under secure aggregation the server holds only "
                                               "the sum of the round's 2 uploads (theta_after - theta_before): use "
                                               "--upload aggregate")


def test_a_plain_runs_aggregate_is_attacked_as_the_secure_runs_is(shared_runs, tmp_path):
    run = shared_runs[RECORDED]
    result = inversion_in_process(run, tmp_path / "report", "--round", 2, "--upload", "aggregate",
                                  "--evaluation-model", independent_model(run, tmp_path / "model"))
    assert result["target"] == "aggregate" and result["participants"] == 2 and result["dp"] is None
    assert result["received"] == "each upload in the clear" and result["reconstruction"]["count"] == 24


def test_a_setting_the_audit_cannot_attack_is_named():
    from types import SimpleNamespace

    def view(cross_device, received):
        return SimpleNamespace(cfg=SimpleNamespace(cross_device=cross_device), received=received, round=1)

    with pytest.raises(Refused, match=r"^--upload one: under secure aggregation the server holds only the sum"):
        check_attackable(view(False, {"secure": True, "upload_names": ["a", "b"]}), SimpleNamespace(upload="one"))
    assert check_attackable(view(True, {"secure": True}), SimpleNamespace(upload=None)) == "cohort"
    with pytest.raises(Refused, match=r"^--party a: the run's participants are device clients \(name them by "
                                      r"--client\)$"):
        check_attackable(view(True, {"secure": False}), SimpleNamespace(upload=None, party="a"))
    with pytest.raises(Refused, match=r"^--client 3: the run's participants are silo parties \(name them by "
                                      r"--party\)$"):
        check_attackable(view(False, {"secure": False}), SimpleNamespace(upload=None, client=[3]))
    with pytest.raises(Refused, match=r"^round 1's recording holds no client's upload$"):
        check_attackable(view(True, {"secure": False}), SimpleNamespace(upload="one"))
    assert check_attackable(view(False, {"secure": True}), SimpleNamespace(upload=None)) == "aggregate"
    assert check_attackable(view(True, {"secure": False, "uploads": 0}), SimpleNamespace(upload=None)) == "clients"


def test_fedaws_rows_across_devices_reidentify_their_owners(shared_runs, tmp_path, capsys):
    run = shared_runs[PHONES]
    with LogReader(run / "log.h5") as log:
        sampled = log.table("clients")["ids"][0]
    with h5py.File(run / "received" / "round-1.h5") as f:
        assert sorted(f["class_row_sender"][:]) == sorted(sampled) and f["class_rows"].shape == (8, 128)
        assert f["class_row_label"][:].tolist() == [0] * 8
    assert main([str(run), "--round", "1", "--attack", "templates", "membership",
                             "--out", str(tmp_path / "report")]) == 0
    report = json.loads((tmp_path / "report" / "audit.json").read_text())
    templates, membership = report["templates"], report["membership"]
    assert templates["rows"] == 8 and templates["gallery"] == 16 and templates["chance"] == 1 / 16
    assert templates["top1"] >= 0.75 and templates["at_threshold"] >= 0.5
    assert membership["members"] == membership["nonmembers"] == 8 and 0 <= membership["auc"] <= 1
    assert membership["dp"] == {}
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == ["audit.json", "audit.md"]
    assert "| re-identified, top-1 |" in (tmp_path / "report" / "audit.md").read_text()


@pytest.mark.parametrize("attack, message", [
    ("templates", "round 2 holds no class rows or clusters: fed.algorithm=fedavg uploads backbone "
                  r"\(class rows: fedaws, fedgc; clusters: privacyface\)$"),
    ("membership", "a silo run trains on every identity its parties hold: name held-out identities of the same "
                   r"distribution that no party holds by --nonmembers DIR \[DIR ...\]"),
])
def test_a_run_without_what_the_attack_needs_is_refused(shared_runs, tmp_path, capsys, attack, message):
    assert main([str(shared_runs[RECORDED]), "--round", "2", "--attack", attack,
                             "--out", str(tmp_path / "report")]) == 2
    said = capsys.readouterr().err.strip()
    assert len(said.splitlines()) == 1 and re.match(f"audit: {message}", said), said
    assert not (tmp_path / "report").exists()


def test_silo_membership_is_scored_against_heldout_identities_no_party_holds(shared_runs, tmp_path, capsys):
    """Each party's style's next identities (sets.prepare_heldout_identities) are the non-members of its 7 + 5
    identities; a party's own folder named as non-members is refused, naming the party."""
    from dataclasses import replace

    from fedmpi.audit.run_view import run_config
    from fedmpi.data.sets import prepare_heldout_identities, synthetic_folder
    from fedmpi.layout import build_layout

    run = shared_runs[RECORDED]
    cfg = run_config(run)
    specs = [spec for party in build_layout(cfg).parties for spec in party.specs]
    data = replace(cfg.data, root=str(tmp_path / "data"))
    folders = [str(prepare_heldout_identities(spec, data, first=spec.identities)) for spec in specs]
    assert main([str(run), "--round", "2", "--attack", "membership", "--nonmembers", *folders,
                 "--out", str(tmp_path / "report")]) == 0
    result = json.loads((tmp_path / "report" / "audit.json").read_text())["membership"]
    assert result["members"] == result["nonmembers"] == 12 and 0 <= result["auc"] <= 1 and result["dp"] == {}
    assert result["nonmember_source"] == f"held-out identities no party holds (--nonmembers {' '.join(folders)})"
    own = synthetic_folder(specs[0], cfg.data)
    capsys.readouterr()
    assert main([str(run), "--round", "2", "--attack", "membership", "--nonmembers", str(own),
                 "--out", str(tmp_path / "no")]) == 2
    assert re.fullmatch(rf"audit: --nonmembers {own}: 7 of its identities are party a's \(identity id [0-9a-f]+\): "
                        r"non-members must be identities no party trained on", capsys.readouterr().err.strip())
    assert not (tmp_path / "no").exists()


def test_silo_class_rows_and_clusters_are_recorded_with_their_senders(shared_runs, tmp_path):
    with h5py.File(shared_runs[SILO_ROWS] / "received" / "round-2.h5") as f:
        assert f["class_rows"].shape == (12, 16)                # party a's 7 identities, then b's 5
        assert f["class_row_sender"][:].tolist() == [0] * 7 + [1] * 5
        assert f["class_row_label"][:].tolist() == [*range(7), *range(5)]
    with h5py.File(shared_runs[SILO_CLUSTERS] / "received" / "round-2.h5") as f:
        clusters = f["clusters"][:]
        assert clusters.shape == (2, 18) and f["cluster_sender"][:].tolist() == [0, 1]
        assert clusters[:, 16].tolist() == pytest.approx([math.pi / 2] * 2) and clusters[:, 17].tolist() == [1, 1]
    for run, out in ((SILO_ROWS, "rows"), (SILO_CLUSTERS, "clusters")):
        assert main([str(shared_runs[run]), "--round", "2", "--attack", "templates",
                                 "--out", str(tmp_path / out)]) == 0
    rows = json.loads((tmp_path / "rows" / "audit.json").read_text())["templates"]
    assert rows["rows"] == 12 and rows["gallery"] == 12 and rows["chance"] == 1 / 12 and len(rows["ranks"]) == 12
    cones = json.loads((tmp_path / "clusters" / "audit.json").read_text())["templates"]
    assert cones["clusters"] == 2 and cones["epsilon"] == pytest.approx(1.4) and cones["delta"] == pytest.approx(2e-5)
    assert all(0 <= n <= 12 for n in cones["inside"])
