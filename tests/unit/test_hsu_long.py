"""The focused alpha = 0 stage of Hsu et al.'s study (jobs/hsu_long.py, make hsu-cpu-long) and its report
(fedmpi.analysis.hsu_long_report): which runs it plans from the tuning study's logs, and the paired verdict."""
from __future__ import annotations

import numpy as np
import pytest

from fedmpi.analysis.hsu_long_report import checkpoints, curves, paired_table, rounds_table, verdict
from fedmpi.analysis.sweep_index import new_index, write_index
from fedmpi.store.h5log import RunLog
from jobs.hsu_long import SCALES, follow_up, neighbours, study


def fake_long_sweep(folder, runs):
    """An hsu sweep of C = 0.1 whose runs (algorithm, beta, alpha, lr, seed) -> accuracy at rounds 1, 11, 21."""
    index = new_index("hsu-long", folder)
    for (algorithm, beta, alpha, lr, seed), accuracies in runs.items():
        name = f"{algorithm}-b{beta:g}-E1-C0.1-a{alpha:g}-lr{lr:g}-s{seed}"
        log_path = folder / "runs" / name / "log.h5"
        log = RunLog(log_path, config_yaml="{}", algorithm=algorithm, run_name=name, parties=["clients"],
                     extra_tables={"eval": {"round": ((), "i8"), "step": ((), "i8"), "test/accuracy": ((), "f8"),
                                            "test/loss": ((), "f8")}})
        for r, accuracy in zip((0, 10, 20), accuracies):
            log.append("eval", round=r, step=r + 1, **{"test/accuracy": accuracy, "test/loss": 1.0})
        log.close()
        index["runs"].append({"name": name, "log": str(log_path), "state": "COMPLETED", "labels": {
            "algorithm": algorithm, "beta": beta, "epochs": 1, "fraction": 0.1, "alpha": alpha, "lr": lr,
            "seed": seed}})
    write_index(folder, index)
    return index


def test_the_stage_rechecks_the_tuned_eta_eff_at_alpha_0_then_runs_the_best_on_the_other_seeds(tmp_path):
    assert neighbours((0.01, 0.02, 0.05, 0.1, 0.2), 0.2) == (0.1, 0.2)
    assert neighbours((0.01, 0.02), 0.03) == (0.03,)
    # from the committed 40-round study: FedAvg chose eta_eff 0.05 at both alpha, FedAvgM beta 0.9 0.02 at
    # alpha = 0 and 0.2 at alpha = 100 (hsu_cpu.md, Table 1)
    planned = study(SCALES["cpu"])
    assert [r.name for r in planned] == [
        "fedavg-b0-E1-C0.1-a0-lr0.02-s0", "fedavg-b0-E1-C0.1-a0-lr0.05-s0", "fedavg-b0-E1-C0.1-a0-lr0.1-s0",
        "fedavg-b0-E1-C0.1-a100-lr0.05-s0", "fedavgm-b0.9-E1-C0.1-a0-lr0.001-s0",
        "fedavgm-b0.9-E1-C0.1-a0-lr0.002-s0", "fedavgm-b0.9-E1-C0.1-a0-lr0.005-s0",
        "fedavgm-b0.9-E1-C0.1-a100-lr0.02-s0"]
    assert {"clients.rounds=300", "eval.every=20"} <= set(planned[0].overrides)
    assert not {"clients.rounds=40", "eval.every=40"} & set(planned[0].overrides)
    # at length FedAvgM's best moves to the larger neighbour (0.005 = eta_eff 0.05)
    fake_long_sweep(tmp_path, {("fedavg", 0.0, 0.0, 0.05, 0): (0.1, 0.1, 0.12),
                               ("fedavg", 0.0, 0.0, 0.1, 0): (0.1, 0.1, 0.11),
                               ("fedavgm", 0.9, 0.0, 0.002, 0): (0.1, 0.2, 0.3),
                               ("fedavgm", 0.9, 0.0, 0.005, 0): (0.1, 0.3, 0.4)})
    assert [r.name for r in follow_up(SCALES["cpu"], tmp_path)] == [
        "fedavg-b0-E1-C0.1-a0-lr0.05-s1", "fedavg-b0-E1-C0.1-a0-lr0.05-s2",
        "fedavgm-b0.9-E1-C0.1-a0-lr0.005-s1", "fedavgm-b0.9-E1-C0.1-a0-lr0.005-s2"]


def test_the_verdict_pairs_the_seeds_round_by_round():
    chosen = {("fedavg", 0.0, 0.0): {s: (np.array([1, 11, 21]), np.array(a)) for s, a in
                                     ((0, [0.1, 0.1, 0.12]), (1, [0.1, 0.1, 0.10]), (2, [0.1, 0.11, 0.14]))},
              ("fedavgm", 0.9, 0.0): {s: (np.array([1, 11, 21]), np.array(a)) for s, a in
                                      ((0, [0.1, 0.2, 0.30]), (1, [0.1, 0.1, 0.20]), (2, [0.1, 0.12, 0.16]))}}
    assert checkpoints(np.array([1, 11, 21]), 5) == [1, 11, 21]
    assert rounds_table(chosen, [11, 21]).rows == [["0", "FedAvg", "0.103 ± 0.005", "0.120 ± 0.020"],
                                                   ["0", "FedAvgM β=0.9", "0.140 ± 0.050", "0.220 ± 0.070"]]
    assert paired_table(chosen, [11, 21]).rows == [["0", "0.037 ± 0.050 [+0.000, +0.100]",
                                                    "0.100 ± 0.080 [+0.020, +0.180]"]]
    claim, here, result = verdict(chosen, [1, 11, 21])
    assert result == "shows"
    assert here == ("round 21: paired 0.100 ± 0.080, lowest seed +0.020, 3 seeds; first round with mean ≥ 0.05 and "
                    "every seed > 0: 21; best accuracy of any seed: FedAvg 0.140, FedAvgM β=0.9 0.300")
    chosen[("fedavgm", 0.9, 0.0)][2] = (np.array([1, 11, 21]), np.array([0.1, 0.1, 0.13]))   # one seed below
    assert verdict(chosen, [1, 11, 21])[2] == "does not show"


def test_curves_read_each_completed_runs_evaluations(tmp_path):
    index = fake_long_sweep(tmp_path, {("fedavg", 0.0, 0.0, 0.05, 1): (0.1, 0.2, 0.25)})
    (rounds, accuracy), = curves(index["runs"])[("fedavg", 0.0, 0.0, 0.05)].values()
    assert rounds.tolist() == [1, 11, 21] and accuracy.tolist() == pytest.approx([0.1, 0.2, 0.25])


def test_the_gpu_command_plans_its_parts_and_sizes_the_runs_to_the_time_left(tmp_path, capsys):
    from jobs.hsu_gpu import main, rounds_that_fit

    assert rounds_that_fit(300.0, 0.1) == 620           # 300 / (4 runs x 0.1 s x 1.2) = 625, a multiple of 10
    assert rounds_that_fit(10.0, 1.0) == 10             # never fewer than 10
    assert main(["--plan", "--folder", str(tmp_path), "--out", str(tmp_path / "hsu_gpu.md")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["speed", "cohort", "hsu"]
    assert lines[0].startswith("speed: -m bench.gpu_check --only speed-ir50 speed-ir100")
    assert lines[1].startswith("cohort: -m bench.clients --device cuda --skip-rounds")
    assert "jobs.reproduce hsu-long --scale gpu" in lines[2]


def test_the_gpu_scale_runs_each_rule_at_the_long_stages_choice_on_one_seed():
    from jobs.hsu_long import chosen_eta_eff

    planned = study(SCALES["gpu"])
    chosen = chosen_eta_eff("docs/results/hsu-cpu-long", 0, 0.1, 0.9)
    assert len(planned) == 4 and {r.labels["seed"] for r in planned} == {0}
    for r in planned:
        beta = r.labels["beta"]
        assert r.labels["lr"] == pytest.approx(chosen[(r.labels["algorithm"], r.labels["alpha"])] * (1 - beta))
        assert {"clients.images=500", "optim.batch_size=64", "run.device=cuda"} <= set(r.overrides)
    assert follow_up(SCALES["gpu"], "docs/results/hsu-cpu-long") == []


def test_the_committed_results_file_is_what_the_report_writes_from_the_committed_logs(tmp_path):
    """`--report-only` over docs/results/hsu-cpu-long writes every generated table of hsu_cpu_long.md as committed
    (but the lines naming the commit it was written at and the sweep folder, and the analysis' seconds)."""
    from committed_reports import generated, rewrite_report
    from jobs.site import ROOT

    out = tmp_path / "hsu_cpu_long.md"
    rewrite_report("hsu-long", "docs/results/hsu-cpu-long", out)

    assert generated(out.read_text()) == generated((ROOT / "docs" / "results" / "hsu_cpu_long.md").read_text())
    assert (tmp_path / "hsu_cpu_long_rounds.png").stat().st_size > 10_000
