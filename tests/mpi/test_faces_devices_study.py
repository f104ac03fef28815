"""`make faces-devices-cpu`'s study at its tiny scale (jobs/faces_devices_study.py): the public pretraining is
exported and read by every device run as model.init; the report has a row per method and seed with the
verification, the collapse and the bytes per client, and the collapse curves."""
from __future__ import annotations

import json

from jobs.faces_devices_study import METHODS, SEEDS, main


def test_the_study_runs_from_one_command_at_its_tiny_scale(tmp_path):
    assert main(["--folder", str(tmp_path), "--scale", "tiny"]) == 0
    assert (tmp_path / "start" / "init.pth").is_file()
    report = (tmp_path / "report.md").read_text()
    rows = [line for line in report.splitlines() if line.startswith("| ") and "seed" not in line]
    assert len(rows) == len(METHODS) * len(SEEDS) and "PrivacyFace on albums: not run" in report
    results = json.loads((tmp_path / "results.json").read_text())
    assert all(len(r["cosine"]) == 2 and r["bytes_per_client"] > 128 * 4 * 2 for r in results.values())
    # the same start, data and sampling: the two methods' first clients trained alike, so round 1's Θ agrees
    assert results["fedavg/0"]["first"] == results["fedaws/0"]["first"]
