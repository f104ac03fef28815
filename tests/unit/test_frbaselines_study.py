"""`python -m jobs.reproduce fr-baselines`: the plan (every method, the same seeds, the same overrides but the
method's own, each rule with its defaults; a method or a layout added by one entry), and the committed results
file against the committed logs (docs/results/fr-baselines_cpu.md, docs/results/fr-baselines-cpu/)."""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from fedmpi.config import load_config
from jobs import frbaselines_study
from jobs.frbaselines_study import LAYOUTS, METHODS, SCALES, Method, study
from jobs.site import ROOT

RESULTS = ROOT / "docs" / "results"


def test_the_cpu_study_runs_every_method_with_the_same_two_seeds_paired():
    runs = {r.name: r for r in study(SCALES["cpu"])}
    assert set(runs) == {f"{m}-s{s}" for m in METHODS for s in (0, 1)}
    assert {"fedaws", "fedgc", "privacyface", "fedface", "centralized"} <= set(METHODS)
    own = {name: set(r.overrides) for name, r in runs.items()}
    shared = set.intersection(*own.values())
    for name, run in runs.items():
        method = run.labels["method"]
        assert own[name] - shared == set(METHODS[method].overrides) - shared | {f"run.seed={run.labels['seed']}"}
        cfg = load_config(ROOT / run.config, list(run.overrides))
        assert cfg.fed.K == 4 and cfg.eval.sets.ijbc == "synthetic" and not cfg.log.tensorboard
        if method in ("fedaws", "fedgc", "privacyface"):   # the rule's defaults: nothing tuned
            assert cfg.fed.algorithm == method and not any(o.startswith("fed.options.") for o in run.overrides)
    assert list(runs)[:len(METHODS)] == [f"{m}-s0" for m in METHODS]     # seed by seed: a cut study has pairs


def test_a_method_in_another_layout_is_one_entry_each(monkeypatch):
    monkeypatch.setitem(LAYOUTS, "12", "f")
    monkeypatch.setitem(METHODS, "fedgc-12", Method(("fed.algorithm=fedgc",), layout="12", label="FedGC, 12"))
    run = next(r for r in study(SCALES["cpu"]) if r.name == "fedgc-12-s1")
    cfg = load_config(ROOT / run.config, list(run.overrides))
    assert len(cfg.parties) == 12 and run.labels == {"method": "fedgc-12", "label": "FedGC, 12", "layout": "12",
                                                     "seed": 1, "baseline": frbaselines_study.BASELINE}


def _md_rows(text: str, heading: str) -> list[list[str]]:
    lines = text.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in lines[start + 2:end]]


@pytest.mark.skipif(not (RESULTS / "fr-baselines_cpu.md").is_file(), reason="no committed results")
def test_the_committed_results_file_holds_the_numbers_of_its_logs():
    """Every run's final held-out accuracy (mean of the pair sets) and IJB-C TAR, read here without the report's code."""
    from fedmpi.store.h5log import LogReader

    rows = _md_rows((RESULTS / "fr-baselines_cpu.md").read_text(), "## Every run")
    assert len(rows) == 2 * len(METHODS)
    for name, _, seed, accuracy, tar3, tar2, *_ in rows:
        with LogReader(RESULTS / "fr-baselines-cpu" / "runs" / name / "log.h5") as log:
            ev = log.table("eval")
            sets = [k for k in ev if k.endswith("/accuracy")]
            assert len(sets) == 5
            assert accuracy == f"{100 * np.mean([ev[k][-1] for k in sets]):.3f}", name
            assert (tar3, tar2) == tuple(f"{100 * ev[f'ijbc/tar_far_{f}'][-1]:.3f}" for f in ("1e-3", "1e-2")), name


@pytest.mark.skipif(not (RESULTS / "fr-baselines_cpu.md").is_file(), reason="no committed results")
def test_the_committed_results_file_is_what_the_report_writes_from_the_committed_logs(tmp_path):
    from fedmpi.analysis.fedface_report import HAND_WRITTEN

    out = tmp_path / "fr-baselines_cpu.md"
    proc = subprocess.run([sys.executable, "-m", "jobs.reproduce", "fr-baselines", "--scale", "cpu", "--report-only",
                           "--folder", "docs/results/fr-baselines-cpu", "--out", str(out)], capture_output=True,
                          text=True, timeout=300, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-2000:]

    def generated(text):
        text = re.sub(r"analysis \d+\.\d+ s", "analysis - s", text.split(HAND_WRITTEN, 1)[0])
        return [line for line in text.splitlines()
                if not line.startswith("This file was written again") and "sweep folder" not in line]

    assert generated(out.read_text()) == generated((RESULTS / "fr-baselines_cpu.md").read_text())
    assert out.with_name("fr-baselines_cpu_curves.png").is_file()
