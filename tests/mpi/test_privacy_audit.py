"""The privacy audit end to end: a FedAvg run of two silo parties records what its server received in round 2
(log.record_received, made in the session's one launch of shared runs), and `python -m tools.audit` attacks
party b's upload from the command line: its report is written into its own folder, nothing else in the run's,
with numbers in range; a round not recorded, an upload not in the round, missing ground-truth data and a setting
it cannot attack are refused in one line."""
import json
import re
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
import torch

from shared_runs import declare
from test_equivalence_mpi import K3, SMALL
from tools.audit import Refused, check_attackable, main

RECORDED = declare("audit-fedavg-k3", [*SMALL, "fed.algorithm=fedavg", *K3, "log.record_received=[2]"])


def audit(*args):
    return subprocess.run([sys.executable, "-m", "tools.audit", *map(str, args)], capture_output=True, text=True,
                          timeout=600)


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
    done = audit(run, "--round", 2, "--party", "b", "--iterations", 5, "--out", tmp_path / "report")
    assert done.returncode == 0, done.stderr
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == ["audit.json", "audit.md",
                                                                       "reconstructions.png"]
    report = json.loads((tmp_path / "report" / "audit.json").read_text())
    inversion, identity = report["inversion"], report["identity"]
    assert report["upload"] == "b" and inversion["count"] == 8 and len(inversion["psnr"]) == 8
    assert 0 < inversion["psnr_mean"] < 60 and -1 <= inversion["ssim_mean"] <= 1
    assert 0 <= identity["recovered"] <= 1 and 0 <= identity["chance"] <= 1
    assert "identity recovered at FAR 0.01" in (tmp_path / "report" / "audit.md").read_text()


@pytest.mark.parametrize("args, message", [
    (["--round", 1], r"round 1 was not recorded: \S+ holds rounds \[2\] \(record it with log.record_received=\[1\]\)"),
    (["--round", 2, "--party", "c"], r"--party c: round 2 holds the uploads of a, b"),
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


def test_a_setting_the_audit_cannot_attack_is_named():
    from types import SimpleNamespace

    silo = SimpleNamespace(cross_device=False)
    with pytest.raises(Refused, match="under secure aggregation the server holds only the sum"):
        check_attackable(silo, {"secure": True, "algorithm": "fedavg", "upload_names": []}, None)
    with pytest.raises(Refused, match="fed.algorithm=pfm: the audit simulates the local SGD steps of fedavg only"):
        check_attackable(silo, {"secure": False, "algorithm": "pfm", "upload_names": ["a"]}, None)
    with pytest.raises(Refused, match="device clients are not attacked yet"):
        check_attackable(SimpleNamespace(cross_device=True), {"secure": False}, None)
