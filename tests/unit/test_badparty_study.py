"""`python -m jobs.reproduce badparty`: the study's plan at CPU scale (which runs, with which
bad party, FV schedule, seeds and DP settings) and the per-run lock of the local runner."""
from __future__ import annotations

import fcntl
import subprocess
import sys

import pytest

from fedmpi.config import load_config
from jobs.badparty_study import SCALES, study
from jobs.executor import layout_of
from jobs.local import LockHolder
from jobs.site import ROOT


@pytest.fixture(scope="module")
def cpu():
    runs = {r.name: r for r in study(SCALES["cpu"])}
    return runs, {name: load_config(ROOT / r.config, list(r.overrides)) for name, r in runs.items()}


def test_fedface_and_fedavg_run_three_seeds_clean_and_with_each_bad_party(cpu):
    runs, cfgs = cpu
    for method in ("fedface", "fedavg"):
        for kind in ("clean", "shuffled", "flipped"):
            assert {runs[f"p3-{method}-{kind}-s{s}"].labels["seed"] for s in (0, 1, 2)} == {0, 1, 2}
    ga = {name: next(p for p in cfg.parties if p.name == "ga") for name, cfg in cfgs.items() if name.startswith("p3-")}
    assert ga["p3-fedface-shuffled-s1"].data.shuffle_labels and ga["p3-fedface-shuffled-s1"].attack.scale == 1.0
    assert ga["p3-fedface-flipped-s1"].attack.scale == -4.0 and not ga["p3-fedface-flipped-s1"].data.shuffle_labels
    assert not ga["p3-fedface-clean-s1"].data.shuffle_labels and ga["p3-fedface-clean-s1"].attack.scale == 1.0
    fv = cfgs["p3-fedface-shuffled-s2"]
    assert fv.fv.enabled and fv.fed.algorithm == "pfm" and fv.fv.iterations_per_round == 2   # deterministic FV
    assert fv.run.seed == 2 and fv.fed.K == 16 and fv.rounds == 12 and fv.log.influence


def test_robust_rules_run_two_seeds_in_both_layouts_with_their_options(cpu):
    runs, cfgs = cpu
    assert cfgs["p3-krum-flipped-s1"].fed.aggregation == {"rule": "krum", "f": 0}
    assert cfgs["p12-krum-flipped-s1"].fed.aggregation == {"rule": "krum", "f": 1}
    assert cfgs["p12-trimmedmean-flipped-s0"].fed.aggregation == {"rule": "trimmed_mean", "beta": 0.1}
    assert not any(name.startswith("p3-trimmedmean") for name in runs)      # with 3 uploads it is the median
    twelve = cfgs["p12-median-flipped-s0"]
    assert next(p for p in twelve.parties if p.name == "ga_0").attack.scale == -4.0
    assert layout_of(str(ROOT / runs["p12-median-flipped-s0"].config),
                     list(runs["p12-median-flipped-s0"].overrides))["world"] == 13
    assert twelve.optim.batch_size * 12 == cfgs["p3-median-flipped-s0"].optim.batch_size * 3
    for method in ("median", "trimmedmean", "krum", "fedavg", "fedface"):
        assert {f"p12-{method}-{kind}-s{seed}" for kind in ("flipped", "shuffled") for seed in (0, 1)} <= set(runs)
    assert next(p for p in cfgs["p12-fedface-shuffled-s1"].parties if p.name == "ga_0").data.shuffle_labels
    for name, rule in [("p3-median", "median"), ("p3-krum", "krum"), ("p12-median", "median"),
                       ("p12-trimmedmean", "trimmed_mean"), ("p12-krum", "krum"), ("p12-fedface", "mean")]:
        clean = cfgs[f"{name}-clean-s1"]        # the clean twins: each rule's accuracy without the bad party
        assert clean.fed.aggregation["rule"] == rule and clean.run.seed == 1 and clean.fv.enabled == (name == "p12-fedface")
        assert not any(p.data.shuffle_labels or p.attack.scale != 1.0 for p in clean.parties)


def test_the_privacy_curve_clips_as_its_papers_say(cpu):
    runs, cfgs = cpu
    """Both clip at the median update norm of their non-private run (a fixed C measured once); both curves reach
    single-digit epsilon at delta 1e-5."""
    from fedmpi.aggregation.accounting import epsilon

    runs, cfgs = cpu
    silo = {n: cfgs[n] for n in runs if n.startswith("dp-silo")}
    assert len(silo) == 5 and all(c.fed.dp.clip == 20.0 and not c.fed.dp.adaptive for c in silo.values())
    assert sorted(c.fed.dp.noise_multiplier for c in silo.values()) == [0.0003, 0.003, 0.03, 0.3, 2.0]
    assert epsilon(12, 2.0, 1e-5) < 10
    cross = {n: cfgs[n] for n in runs if n.startswith("dp-cross")}
    assert not cross["dp-cross-z0"].fed.dp.enabled and len(cross) == 8 + 6
    assert {cross[n].run.seed for n in ("dp-cross-z0.3", "dp-cross-z0.3-s1", "dp-cross-z0.3-s2")} == {0, 1, 2}
    assert all(c.cross_device and not c.fed.dp.adaptive for c in cross.values())
    assert all(c.fed.dp.clip == 0.17 for n, c in cross.items() if n != "dp-cross-z0")
    assert epsilon(20, 1.0, 1e-5, 0.25) < 10 and cfgs["dp-cross-z3"].fed.dp.noise_multiplier == 3.0


def test_runs_hold_the_lock_only_while_they_run_and_release_it_once_the_hold_is_spent(tmp_path):
    lock = str(tmp_path / "heavy.lock")

    def free() -> bool:
        with open(lock, "a") as other:
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                return False

    per_run = LockHolder(lock)
    per_run.acquire()
    assert not free()
    per_run.release_if_spent()
    assert free()
    batch = LockHolder(lock, hold_s=3600)
    batch.acquire()
    batch.release_if_spent()
    assert not free() and batch.acquire() == 0.0          # still held: the next run does not wait
    batch.release()
    assert free()
    with LockHolder(lock):                                 # a block holds it, and lets it go on leaving
        assert not free()
    assert free()


def test_a_folder_inside_the_repository_is_planned_with_paths_relative_to_it():
    out = subprocess.run([sys.executable, "-m", "jobs.reproduce", "badparty", "--scale", "tiny", "--dry-run",
                          "--folder", str(ROOT / "sweeps" / "plan-only")], capture_output=True, text=True, timeout=60,
                         cwd="/")
    assert out.returncode == 0, out.stderr
    assert "data.root=sweeps/plan-only/data log.dir=sweeps/plan-only/runs log.name=p3-fedface-shuffled-s0" in out.stdout
    assert str(ROOT) not in out.stdout and not (ROOT / "sweeps" / "plan-only").exists()


def test_the_committed_results_file_holds_the_numbers_of_its_logs():
    """docs/results/badparty_cpu.md against the committed logs, read here without the report's code: FedFace's
    final FV weight of the bad party and its clean twin's, and the held-out accuracy (mean of the final
    evaluation over the validation sets)."""
    import numpy as np

    from fedmpi.store.h5log import LogReader
    from test_reproduce import md_rows

    results = ROOT / "docs" / "results"
    rows = md_rows((results / "badparty_cpu.md").read_text(), "## FV's weight of a bad party")
    assert {r[0] for r in rows} == {"shuffled", "flipped"} and len(rows) >= 6

    def read(name):
        with LogReader(results / "badparty-cpu" / "runs" / name / "log.h5") as log:
            ga, ev = log.parties.index("ga"), log.table("eval")
            accuracy = 100 * np.mean([ev[f"{s}/accuracy"][-1] for s in log.val_sets])
            return float(log.table("fv")["w"][-1][ga]), accuracy

    for row in rows:
        w_bad, accuracy = read(f"p3-fedface-{row[0]}-s{row[1]}")
        w_clean, _ = read(f"p3-fedface-clean-s{row[1]}")
        assert (row[3], row[4], row[8]) == (f"{w_bad:.3f}", f"{w_clean:.3f}", f"{accuracy:.3f}")


def test_a_diverged_run_is_shown_as_such_and_left_out_of_the_means():
    from fedmpi.analysis.badparty_report import Outcome, accuracy_cell

    def outcome(accuracy, diverged_round=None):
        o = Outcome.__new__(Outcome)
        o.accuracy, o.diverged_round, o.stopped = accuracy, diverged_round, None
        return o

    runs = [outcome(80.0), outcome(70.0), outcome(float("nan"), 12)]
    assert accuracy_cell(runs) == "75.00 ± 5.00 (1 of 3 diverged)"
    assert accuracy_cell(runs[:2]) == "75.00 ± 5.00"
    assert runs[2].shown_accuracy == "diverged (round 12)" and runs[0].shown_accuracy == 80.0


def test_a_run_stopped_by_its_diverged_global_model_is_an_outcome_with_its_line(tmp_path):
    """A run the server stopped (state DIVERGED) in its first round has no log: its outcome is the round and the
    one line of its stderr.txt."""
    from fedmpi.analysis.badparty_outcomes import Outcome, stop_line

    (tmp_path / "stderr.txt").write_text("[rank1]:[W TCPStore.cpp] recvValue failed\nrank 0 (server): round 2: the "
                                         "global model is no longer finite after the aggregation; out-of-range "
                                         "uploads aggregated: ga in round 1 (...)\n")
    line = stop_line(tmp_path)
    assert line.startswith("round 2: the global model is no longer finite")
    stopped = Outcome(tmp_path / "log.h5", {"party": "ga"}, line)
    assert stopped.shown_accuracy == "stopped (round 2)" and stopped.rounds_logged == 0


def test_the_committed_privacy_curve_holds_the_numbers_of_its_logs():
    """docs/results/badparty_cpu.md's privacy-utility table against the committed logs, read here without the
    report's code: ε after the last round and the held-out accuracy (or the round the model diverged)."""
    import numpy as np

    from fedmpi.store.h5log import LogReader
    from test_reproduce import md_rows

    results = ROOT / "docs" / "results"
    rows = [r for r in md_rows((results / "badparty_cpu.md").read_text(), "## Privacy-utility curve") if float(r[1])]
    assert {r[0].split(",")[0] for r in rows} == {"silo", "cross-device"} and len(rows) >= 10
    assert any(r[0].startswith("cross") and r[6] == "0, 1, 2" for r in rows)       # a point in 3 seeds
    for setting, z, eps, _, shown, per_seed, seeds in rows:
        finals, epsilons = [], set()
        for seed in seeds.split(", "):
            name = (f"dp-silo-C20-z{float(z):g}" if setting.startswith("silo") else
                    f"dp-cross-z{float(z):g}" + ("" if seed == "0" else f"-s{seed}"))
            with LogReader(results / "badparty-cpu" / "runs" / name / "log.h5") as log:
                epsilons.add(f'{log.table("privacy")["epsilon"][-1]:.4f}')
                ev = log.table("eval")
                accuracy = np.array([ev[f"{s}/accuracy"] for s in log.val_sets or ["test"]])
            lost = np.flatnonzero(np.isnan(accuracy).any(axis=0))
            finals.append(f"diverged (round {ev['round'][lost[0]] + 1})" if lost.size else 100 * accuracy[:, -1].mean())
        if len(finals) == 1:
            expected = finals[0] if isinstance(finals[0], str) else f"{finals[0]:.2f}"
        else:
            assert per_seed == ", ".join(f"{a:.1f}" for a in finals), name
            expected = f"{np.mean(finals):.2f} ± {(max(finals) - min(finals)) / 2:.2f}"
        assert epsilons == {eps} and shown == expected, name


def test_the_committed_results_file_is_what_the_report_writes_from_the_committed_logs(tmp_path):
    """`--report-only` over docs/results/badparty-cpu writes every generated table of badparty_cpu.md as committed
    (all but the lines naming the commit it was written at and the sweep folder relative to it, and the time the
    analysis took); its figures exist."""
    import re

    from fedmpi.analysis.fedface_report import HAND_WRITTEN

    out = tmp_path / "badparty_cpu.md"
    proc = subprocess.run([sys.executable, "-m", "jobs.reproduce", "badparty", "--scale", "cpu", "--report-only",
                           "--folder", "docs/results/badparty-cpu", "--out", str(out)], capture_output=True, text=True,
                          timeout=300, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-2000:]

    def generated(text):
        text = text.split(HAND_WRITTEN, 1)[0]
        text = re.sub(r"analysis \d+\.\d+ s", "analysis - s", text)
        return [line for line in text.splitlines()       # these two name where the file and its commit are
                if not line.startswith("This file was written again") and "sweep folder" not in line]

    assert generated(out.read_text()) == generated((ROOT / "docs" / "results" / "badparty_cpu.md").read_text())
    for name in ("fv_weights", "accuracy", "privacy", "scaled"):
        assert (tmp_path / f"badparty_cpu_{name}.png").stat().st_size > 10_000, name
