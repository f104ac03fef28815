"""`make faces-devices-cpu`'s study at its tiny scale (jobs/faces_devices_study.py): the public pretraining is
exported and read by every device run as model.init (PrivacyFace's albums included); the start itself is evaluated
on the runs' folds and IJB-C; the report has a row per method and seed with the verification, the collapse and the
bytes per client, and the collapse curves. The device runs share one launch (jobs/one_launch.py), each holding the
study's lock only while it runs; a run already in the folder is not run again."""
from __future__ import annotations

import json

import jobs.faces_devices_study as study
from jobs.faces_devices_study import METHODS, SCALES, main


def test_the_study_runs_from_one_command_at_its_tiny_scale(tmp_path, monkeypatch):
    launches = []

    def mpirun(n, argv, **kwargs):
        launches.append(argv[:2])
        return launch(n, argv, **kwargs)

    launch = study.mpirun
    monkeypatch.setattr(study, "mpirun", mpirun)
    assert main(["--folder", str(tmp_path), "--scale", "tiny", "--lock", str(tmp_path / "lock")]) == 0
    assert launches == [["-m", "fedmpi.run"], ["-m", "jobs.one_launch"]]     # the pretraining, the device runs
    names = [(name, seed) for seed in SCALES["tiny"]["seeds"] for name in METHODS]
    study.device_runs(tmp_path, SCALES["tiny"], tmp_path / "start" / "init.pth", names, None)
    assert len(launches) == 2            # every run is there: none runs again
    assert (tmp_path / "start" / "init.pth").is_file()
    report = (tmp_path / "report.md").read_text()
    rows = [line for line in report.splitlines() if line.startswith("| ") and "seed" not in line]
    assert len(rows) == len(METHODS) * len(SCALES["tiny"]["seeds"])
    assert {row.split(" | ")[0][2:] for row in rows} == {label for label, _, _ in METHODS.values()}
    results = json.loads((tmp_path / "results.json").read_text())
    start = results.pop("start")
    assert 0 < start["accuracy"] <= 1 and 0 <= start["ijb"] <= 1
    assert f"accuracy {100 * start['accuracy']:.2f}" in report
    assert all(len(r["cosine"]) == 2 and r["bytes_per_client"] > 128 * 4 * 2 for r in results.values())
    # the same start, data and sampling: the two methods' first clients trained alike, so round 1's Θ agrees
    assert results["fedavg/0"]["first"] == results["fedaws-fedfr/0"]["first"]
