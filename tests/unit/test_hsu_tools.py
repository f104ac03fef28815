"""The hsu sweep's grid (python -m jobs.sweep hsu) and the tools that read it: fedmpi.analysis.hsu_table (rows C, columns
alpha, panels E, best lr per cell averaged over seeds, FedAvg / FedAvgM), fedmpi.analysis.hsu_lr (accuracy vs eta_eff)
and the two-stage study of make hsu-cpu (jobs/hsu_study.py, fedmpi.analysis.hsu_report: paired seeds, claims)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from fedmpi.store.h5log import RunLog
from jobs.hsu_sweep import HsuGrid
from fedmpi.analysis.sweep_index import new_index, write_index
from jobs.sweep_plans import plan
from fedmpi.analysis.hsu_table import hsu_tables
from fedmpi.analysis.hsu_results import load_results
from fedmpi.analysis.tables import render


def test_the_paper_grid_and_its_reduction():
    runs = plan("hsu")
    assert len(runs) == 8 * 4 * 2 * 8 * 5 * (1 + 5)          # alpha x C x E x lr x seeds x (FedAvg + 5 betas)
    small = plan("hsu", grid=HsuGrid(alpha=(100.0, 0.0), fraction=(0.1,), epochs=(1,), lr=(0.01, 0.1), seeds=(0,),
                                     beta=(0.9,)), extra=["clients.rounds=5"])
    assert [r.name for r in small][:2] == ["fedavg-b0-E1-C0.1-a100-lr0.01-s0", "fedavg-b0-E1-C0.1-a100-lr0.1-s0"]
    assert len(small) == 8
    m = [r for r in small if r.name == "fedavgm-b0.9-E1-C0.1-a0-lr0.1-s0"][0]
    assert m.overrides[-1] == "clients.rounds=5" and "fed.server.momentum=0.9" in m.overrides
    assert "clients.alpha=0.0" in m.overrides and "clients.partition_seed=0" in m.overrides
    assert m.labels == {"algorithm": "fedavgm", "beta": 0.9, "epochs": 1, "fraction": 0.1, "alpha": 0.0, "lr": 0.1,
                        "seed": 0}
    paired = plan("hsu", grid=HsuGrid(alpha=(0.0,), fraction=(0.25,), epochs=(1,), lr=(0.05,), seeds=(0,),
                                      beta=(0.9,), equal_eta_eff=True))
    assert [(r.labels["algorithm"], r.labels["lr"]) for r in paired] == [("fedavg", 0.05), ("fedavgm", 0.005)]
    assert "optim.lr=0.005" in paired[1].overrides          # eta_eff 0.05 = 0.005 / (1 - 0.9)
    with pytest.raises(ValueError, match="the grid flags .* are for the hsu sweep, not fig4"):
        plan("fig4", grid=HsuGrid())


def test_sweep_command_line_reduces_the_grid_and_refuses_bad_values(tmp_path):
    args = [sys.executable, "-m", "jobs.sweep", "hsu", "--dry-run", "--alpha", "100,0", "--fraction", "0.4",
            "--epochs", "1", "--lr", "0.1", "--seeds", "0,1", "--beta", "0.9,0.99", "--folder", str(tmp_path)]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "12 runs" in out.stdout     # alpha 2 x seeds 2 x (FedAvg + 2 betas)
    bad = subprocess.run(args[:-2] + ["--algorithms", "fedprocs"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--algorithms: fedprocs (known: fedavg, fedavgm," in bad.stderr


def fake_sweep(folder, accuracies: dict) -> None:
    """An hsu sweep folder: index.json rows with labels, each with a log whose last /eval row is the accuracy."""
    index = new_index("hsu", folder)
    for (algorithm, beta, E, C, alpha, lr, seed), accuracy in accuracies.items():
        name = f"{algorithm}-b{beta:g}-E{E}-C{C:g}-a{alpha:g}-lr{lr:g}-s{seed}"
        log_path = folder / "runs" / name / "log.h5"
        log = RunLog(log_path, config_yaml="{}", algorithm=algorithm, run_name=name, parties=["clients"],
                     extra_tables={"eval": {"round": ((), "i8"), "step": ((), "i8"), "test/accuracy": ((), "f8"),
                                            "test/loss": ((), "f8")}})
        log.append("eval", round=0, step=1, **{"test/accuracy": 0.1, "test/loss": 2.3})
        log.append("eval", round=9, step=10, **{"test/accuracy": accuracy, "test/loss": 1.0})
        log.close()
        index["runs"].append({"name": name, "log": str(log_path), "labels": {
            "algorithm": algorithm, "beta": beta, "epochs": E, "fraction": C, "alpha": alpha, "lr": lr, "seed": seed}})
    write_index(folder, index)


ACCURACIES = {
    # E=1, C=0.1, alpha=100: FedAvg lr 0.01 (seeds 0.80, 0.70 -> 0.75) beats lr 0.1 (0.90, 0.50 -> 0.70)
    ("fedavg", 0.0, 1, 0.1, 100.0, 0.01, 0): 0.80, ("fedavg", 0.0, 1, 0.1, 100.0, 0.01, 1): 0.70,
    ("fedavg", 0.0, 1, 0.1, 100.0, 0.1, 0): 0.90, ("fedavg", 0.0, 1, 0.1, 100.0, 0.1, 1): 0.50,
    ("fedavg", 0.0, 1, 0.1, 0.0, 0.01, 0): 0.30, ("fedavg", 0.0, 1, 0.1, 0.0, 0.01, 1): 0.20,
    ("fedavg", 0.0, 1, 0.4, 0.0, 0.01, 0): 0.40,
    # FedAvgM: best over (lr, beta)
    ("fedavgm", 0.9, 1, 0.1, 100.0, 0.01, 0): 0.82, ("fedavgm", 0.97, 1, 0.1, 100.0, 0.01, 0): 0.84,
    ("fedavgm", 0.9, 1, 0.1, 0.0, 0.01, 0): 0.60,
    ("fedavg", 0.0, 5, 0.1, 100.0, 0.01, 0): 0.81,
}


def test_table_best_lr_per_cell_averaged_over_seeds(tmp_path):
    fake_sweep(tmp_path, ACCURACIES)
    e1, e5 = hsu_tables(load_results(tmp_path), "text")
    assert e1.title == "(a) Local epochs E = 1" and e5.title == "(b) Local epochs E = 5"
    assert e1.header == ["C", "α=100", "α=0"]
    assert e1.rows == [["C=0.4", "- / -", "0.400 / -"], ["C=0.1", "0.750 ±0.050 / 0.840", "0.250 ±0.050 / 0.600"]]
    assert "FedAvg C=0.1 α=100: lr 0.01" in e1.footnotes[1]
    assert "FedAvgM C=0.1 α=100: lr 0.01, β 0.97" in e1.footnotes[1]
    assert e5.rows == [["C=0.1", "0.810 / -"]]       # the same two algorithms in every panel
    csv = render(hsu_tables(load_results(tmp_path), "csv")[0], "csv").splitlines()
    assert csv[0] == "C,alpha=100 FedAvg,alpha=100 FedAvgM,alpha=0 FedAvg,alpha=0 FedAvgM"
    assert csv[2] == "0.1,0.75,0.84,0.25,0.6"
    md = subprocess.run([sys.executable, "-m", "fedmpi.analysis.hsu_table", str(tmp_path), "--format", "md"],
                        capture_output=True, text=True, timeout=120)
    assert md.returncode == 0 and "| C=0.1 | 0.750 ±0.050 / 0.840 | 0.250 ±0.050 / 0.600 |" in md.stdout
    # equal eta_eff = 0.1: FedAvg at lr 0.1 (seeds 0.90, 0.50) against FedAvgM beta 0.9 at lr 0.01
    assert "| η_eff=0.1 (β=0.9) | 0.700 ±0.200 / 0.820 | - / 0.600 |" in md.stdout


def test_lr_figure_and_errors(tmp_path):
    fake_sweep(tmp_path, ACCURACIES)
    out = subprocess.run([sys.executable, "-m", "fedmpi.analysis.hsu_lr", str(tmp_path), "--fig", str(tmp_path / "lr.png")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "lr.png").stat().st_size > 10_000
    from fedmpi.analysis.hsu_lr import curves, seeded_points
    results = load_results(tmp_path)
    lines = curves(results)[(1, 0.1, 100.0)]
    assert lines[0.0] == [(0.01, 0.8), (0.1, 0.9)]               # the seed every setting ran (seed 0)
    assert lines[0.97] == [(pytest.approx(0.01 / 0.03), 0.84)]   # eta_eff = eta / (1 - beta)
    bars = seeded_points(results)[(1, 0.1, 100.0)][0.0]          # points with more seeds: mean ± half range
    assert [(eta, pytest.approx(mean), pytest.approx(half)) for eta, mean, half in bars] == [(0.01, 0.75, 0.05),
                                                                                             (0.1, 0.7, 0.2)]
    (tmp_path / "empty").mkdir()
    bad = subprocess.run([sys.executable, "-m", "fedmpi.analysis.hsu_table", str(tmp_path / "empty")], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and "no sweep index here" in bad.stderr


def test_the_study_tunes_on_one_seed_then_runs_each_cells_best_on_the_others(tmp_path):
    from fedmpi.analysis.hsu_report import Cells, claims, paired_table, windows
    from jobs.hsu_study import SCALES, HsuScale, follow_up, study

    cpu = study(SCALES["cpu"])
    assert len(cpu) == 2 * 2 * 3 * 5 and {r.labels["seed"] for r in cpu} == {0}   # alpha x C x rules x eta_eff
    assert "optim.lr=0.0003" in next(r for r in cpu if r.name == "fedavgm-b0.97-E1-C0.1-a0-lr0.0003-s0").overrides
    scale = HsuScale(common=("clients.rounds=2",), alpha=(100.0, 0.0), fraction=(0.1,), beta=(0.9,),
                     eta_eff=(0.01, 0.1), seeds=(0, 1, 2))
    tuned = {("fedavg", 0.0, 1, 0.1, 100.0, 0.01, 0): 0.5, ("fedavg", 0.0, 1, 0.1, 100.0, 0.1, 0): 0.6,
             ("fedavg", 0.0, 1, 0.1, 0.0, 0.01, 0): 0.2, ("fedavg", 0.0, 1, 0.1, 0.0, 0.1, 0): 0.1,
             ("fedavgm", 0.9, 1, 0.1, 100.0, 0.001, 0): 0.7, ("fedavgm", 0.9, 1, 0.1, 100.0, 0.01, 0): 0.65,
             ("fedavgm", 0.9, 1, 0.1, 0.0, 0.001, 0): 0.4, ("fedavgm", 0.9, 1, 0.1, 0.0, 0.01, 0): 0.3}
    fake_sweep(tmp_path, tuned)
    assert [r.name for r in follow_up(scale, tmp_path)] == [
        "fedavg-b0-E1-C0.1-a0-lr0.01-s1", "fedavg-b0-E1-C0.1-a0-lr0.01-s2",
        "fedavg-b0-E1-C0.1-a100-lr0.1-s1", "fedavg-b0-E1-C0.1-a100-lr0.1-s2",
        "fedavgm-b0.9-E1-C0.1-a0-lr0.001-s1", "fedavgm-b0.9-E1-C0.1-a0-lr0.001-s2",
        "fedavgm-b0.9-E1-C0.1-a100-lr0.001-s1", "fedavgm-b0.9-E1-C0.1-a100-lr0.001-s2"]
    # the seeds of the chosen settings: FedAvgM above FedAvg at alpha = 0 in every seed, paired
    more = {("fedavg", 0.0, 1, 0.1, 0.0, 0.01, s): a for s, a in ((1, 0.15), (2, 0.25))}
    more |= {("fedavgm", 0.9, 1, 0.1, 0.0, 0.001, s): a for s, a in ((1, 0.35), (2, 0.3))}
    more |= {("fedavg", 0.0, 1, 0.1, 100.0, 0.1, s): 0.6 for s in (1, 2)}
    more |= {("fedavgm", 0.9, 1, 0.1, 100.0, 0.001, s): 0.7 for s in (1, 2)}
    fake_sweep(tmp_path, tuned | more)
    results = load_results(tmp_path)
    cells = Cells(results)
    assert cells.seeds[("fedavgm", 0.9, 0.1, 0.0)] == {0: 0.4, 1: 0.35, 2: 0.3}
    assert cells.paired(("fedavgm", 0.9, 0.1, 0.0), ("fedavg", 0.0, 0.1, 0.0)) == pytest.approx([0.2, 0.2, 0.05])
    assert paired_table(cells).rows[0][2:] == ["0.100 ± 0.000 [+0.100, +0.100]", "0.150 ± 0.075 [+0.050, +0.200]"]
    verdicts = {row[0]: row[2] for row in claims(cells, windows(results, 0)).rows}
    assert verdicts["FedAvg's accuracy falls as α → 0 (Table 1)"] == "shows"
    assert verdicts["FedAvgM β=0.9 keeps more than FedAvg at α=0 (76.9 % against 30.1 % in the paper)"] == \
        "shows in every seed"


def test_the_committed_results_file_is_what_the_report_writes_from_the_committed_logs(tmp_path):
    """`--report-only` over docs/results/hsu-cpu writes every generated table of hsu_cpu.md as committed (but the
    lines naming the commit it was written at and the sweep folder, and the analysis' seconds); its figure exists."""
    from committed_reports import generated, rewrite_report
    from jobs.site import ROOT

    out = tmp_path / "hsu_cpu.md"
    rewrite_report("hsu", "docs/results/hsu-cpu", out)

    assert generated(out.read_text()) == generated((ROOT / "docs" / "results" / "hsu_cpu.md").read_text())
    assert (tmp_path / "hsu_cpu_lr.png").stat().st_size > 10_000
