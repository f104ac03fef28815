"""A committed study report against what `jobs.reproduce STUDY --report-only` writes from the committed logs: the
generated part only (above the hand-written one), without the lines that name the commit it was written at or the
sweep folder, and with the analysis' seconds blanked."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from jobs.site import ROOT


def rewrite_report(study: str, folder: str, out: Path) -> None:
    """`python -m jobs.reproduce STUDY --scale cpu --report-only --folder FOLDER --out OUT` from the repository root."""
    proc = subprocess.run([sys.executable, "-m", "jobs.reproduce", study, "--scale", "cpu", "--report-only",
                           "--folder", folder, "--out", str(out)], capture_output=True, text=True, timeout=300,
                          cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-2000:]


def generated(text: str, blank_lines: bool = False) -> list[str]:
    """The generated lines of a report's text (its blank lines too where `blank_lines`)."""
    from fedmpi.analysis.fedface_report import HAND_WRITTEN

    text = re.sub(r"analysis \d+\.\d+ s", "analysis - s", text.split(HAND_WRITTEN, 1)[0])
    return [line for line in text.splitlines() if (line or blank_lines)
            and not line.startswith("This file was written again") and "sweep folder" not in line]
