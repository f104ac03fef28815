"""The committed faces-devices study (docs/results/faces-devices-cpu) is what its committed logs and the start's
evaluation give: `jobs.faces_devices_study --report-only` rewrites report.md from them alone."""
from __future__ import annotations

import subprocess
import sys

from jobs.site import ROOT

FOLDER = "docs/results/faces-devices-cpu"


def report_only(folder: str, out) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobs.faces_devices_study", "--folder", folder, "--report-only",
                           str(out)], capture_output=True, text=True, timeout=300, cwd=str(ROOT))


def test_the_committed_report_is_what_its_logs_give(tmp_path):
    proc = report_only(FOLDER, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "report.md").read_text() == (ROOT / FOLDER / "report.md").read_text()


def test_a_folder_without_the_runs_is_named_in_one_line(tmp_path):
    proc = report_only(str(tmp_path), tmp_path / "out")
    assert proc.returncode != 0
    line = proc.stderr.strip()
    assert line.startswith(f"--report-only: {tmp_path} lacks fedavg-seed0, ") and line.endswith(
        ": run the study first") and "\n" not in line
