"""bench/gpu_check.py where no GPU is: the GPU checks skipped in one line, the verdicts on known numbers, the
budget, and the GPU scripts' code paths run on CPU (the trainer-vs-plain comparison, the sharded classifier)."""
from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
import torch

from bench import gpu_check
from jobs.mpirun import ROOT, mpi_env, mpirun


def test_without_a_gpu_the_gpu_checks_are_skipped_in_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(gpu_check, "gpu_missing", lambda: "torch sees no CUDA device")
    code = gpu_check.main(["--only", "speed-ir50", "sharded-classifier", "--out", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    said = [line for line in out if "skipped" in line.lower()]
    assert said[0] == "GPU checks skipped: torch sees no CUDA device" and len(said) == 2
    assert said[1].startswith("gpu-check: 0 passed, 0 failed, 2 skipped (no GPU), ")
    assert out[out.index("path                result         time"):][1:3] == [
        "speed-ir50          SKIP (no GPU)  0 s", "sharded-classifier  SKIP (no GPU)  0 s"]


def test_without_a_gpu_the_runs_paths_run_on_the_cpu_and_are_tabled(monkeypatch, capsys, tmp_path):
    """A path check runs where there is no GPU, on the CPU, and says so in its line and in the table."""
    seen = []

    def path(args):
        seen.append(gpu_check.device_of(args))
        return gpu_check.Outcome("PASS", ["3 ranks on cpu, 2 rounds, exit 0"])

    monkeypatch.setattr(gpu_check, "gpu_missing", lambda: "torch sees no CUDA device")
    monkeypatch.setattr(gpu_check, "CHECKS", [gpu_check.Check("speed-ir50", "gpu", None, 60),
                                              gpu_check.Check("crossdevice-scaffold-krum", "path", path, 25)])
    assert gpu_check.main(["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert seen == ["cpu"]
    assert out[1].startswith("the run's GPU paths (crossdevice-scaffold-krum) run on the CPU instead, scaled down")
    assert out[2].startswith("PASS crossdevice-scaffold-krum (cpu) (")
    assert out[-2] == "crossdevice-scaffold-krum  PASS (cpu)     0 s"
    assert out[-1].startswith("gpu-check: 1 passed, 0 failed, 1 skipped (no GPU), ")


def speed_result(trainer: float, losses=(2.0, 2.01), end_to_end=(1000.0, 960.0, 900.0)) -> dict:
    return {"backbone": "ir50", "rows": [{"name": "eager plain loop", "img_s": 1000.0},
                                         {"name": "trainer default", "img_s": trainer},
                                         {"name": "compile max-autotune", "not_run": "--full only"}],
            "loss": {"trainer": losses[0], "plain": losses[1]},
            "end_to_end": [{"name": name, "img_s": rate} for name, rate in zip(("resident batch", "cpu", "gpu"),
                                                                               end_to_end)]}


def test_speed_verdict_against_the_floor_and_the_goals():
    """PASS needs the default trainer at 0.98x the plain loop and the losses within 1 %; the goals are said."""
    outcome = gpu_check.speed_verdict(speed_result(1500.0), [])
    assert outcome.status == "PASS"
    assert outcome.lines == ["goal 1.5x the eager plain loop: met (1.500x)",
                             "goal end to end >= 0.95x (cpu): met (0.960x)",
                             "goal end to end >= 0.95x (gpu): NOT met (0.900x)"]
    assert gpu_check.speed_verdict(speed_result(980.0), []).status == "PASS"
    assert gpu_check.speed_verdict(speed_result(980.0), []).lines[0] == "goal 1.5x the eager plain loop: NOT met (0.980x)"
    assert gpu_check.speed_verdict(speed_result(979.0), []).status == "FAIL"
    assert gpu_check.speed_verdict(speed_result(1500.0, losses=(2.0, 2.03)), []).status == "FAIL"


def test_a_check_past_the_budget_or_failing_fails_the_command(monkeypatch, capsys, tmp_path):
    assert gpu_check.main(["--only", "startup", "--budget-s", "10", "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "NOT RUN startup: 0 s spent, about 40 s more would pass the budget of 10 s" in out
    assert "startup  FAIL (not run)  0 s" in out

    def broken(args):
        raise RuntimeError("NCCL error: unhandled system error")

    monkeypatch.setattr(gpu_check, "CHECKS", [gpu_check.Check("broken", "cpu", broken, 1)])
    assert gpu_check.main(["--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL broken" in out and "RuntimeError: NCCL error: unhandled system error" in out
    assert "gpu-check: 0 passed, 1 failed (broken)" in out


def fake_run(folder, theta, w):
    folder.mkdir()
    torch.save({"theta": theta}, folder / "final.pt")
    with h5py.File(folder / "log.h5", "w") as f:
        f.create_group("rounds").create_dataset("loss", data=np.array([[1.0, 2.0], [0.5, 0.25]]))
        f.create_group("fv").create_dataset("w", data=np.asarray(w))


def test_runs_compared_bit_for_bit(tmp_path):
    theta = torch.linspace(0, 1, 7)
    fake_run(tmp_path / "a", theta, [[0.5, 0.5]])
    fake_run(tmp_path / "b", theta.clone(), [[0.5, 0.5]])
    fake_run(tmp_path / "c", theta + torch.tensor([0, 0, 0, 1e-7, 0, 0, 0]), [[0.5, 0.5 + 1e-16]])
    assert gpu_check.compare_runs(tmp_path / "a", tmp_path / "b") == []
    assert gpu_check.compare_runs(tmp_path / "a", tmp_path / "c") == ["final theta (max |diff| 1.192e-07)", "fv/w"]
    assert gpu_check.bitwise_verdict([]).status == "PASS"
    assert gpu_check.bitwise_verdict(["fv/w"]).lines == ["differs: fv/w"]


def test_trainer_and_plain_loop_run_on_cpu(tmp_path):
    """The comparison's code path (a Trainer of a one-rank party in a one-rank world, the plain loop), on CPU."""
    script = ("import json, sys; from bench.gpu_throughput import compare; print(json.dumps(compare('ir18', "
              "batch=4, image_size=32, steps=1, repeats=1, data_root=sys.argv[1], device='cpu', "
              "extra=['model.width=0.125', 'model.embedding_size=16', 'parties.ms1m.data.identities=20'])))")
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "data")], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=mpi_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["trainer"] > 0 and result["plain"] > 0 and result["trainer_peak_gb"] == 0.0



def test_the_trainer_and_the_plain_loop_time_the_same_starting_model(tmp_path):
    """The trainer starts from the weights the plain loop starts from, as a run's first global model reaches it:
    the empty payload's zeros would make its BatchNorm slower on all-zero activations (0.95x on an H200, the
    weights alone), a difference that is none of the step's."""
    script = ("import sys, torch; from bench.gpu_throughput import build_trainer, one_rank_world, starting_backbone\n"
              "one_rank_world(torch.device('cpu'))\n"
              "t, cfg = build_trainer('ir18', 4, 32, sys.argv[1], torch.device('cpu'), ['model.width=0.125', "
              "'model.embedding_size=16', 'parties.ms1m.data.identities=20'])\n"
              "net = starting_backbone(cfg, 32, torch.device('cpu'))\n"
              "x = torch.randn(4, 3, 32, 32)\n"
              "t.model.eval(); net.eval()\n"
              "a, b = t.model(x), net(x)\n"
              "print(float(a.norm()) > 0, torch.equal(a, b))")
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "data")], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=mpi_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1] == "True True"

def test_the_speed_tables_trainers_compute_the_same_first_step_on_cpu(tmp_path):
    """bench/gpu_speed.py on CPU: the plain loop and a trainer per option (channels_last on and off, the classifier
    step unfused), each from the same starting weights on the same batch; the options that need CUDA listed as
    not run. Every trainer's first loss is the default trainer's (within float32 rounding: the layouts reorder
    sums); the table and its JSON written."""
    out = tmp_path / "speed.json"
    proc = subprocess.run([sys.executable, "-m", "bench.gpu_speed", "--device", "cpu", "--backbone", "ir18", "--batch",
                           "4", "--image-size", "32", "--steps", "1", "--repeats", "1", "--data-root",
                           str(tmp_path / "data"), "--json", str(out), "--only", "trainer default", "NCHW",
                           "channels_last", "classifier step unfused", "CUDA graphs", "--extra", "model.width=0.125",
                           "model.embedding_size=16", "parties.ms1m.data.identities=20"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=mpi_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    assert list(rows) == ["eager plain loop", "trainer default", "NCHW", "channels_last", "classifier step unfused",
                          "CUDA graphs"]
    assert rows["CUDA graphs"] == {"name": "CUDA graphs", "not_run": "needs CUDA"}
    assert rows["channels_last"]["settings"] == "channels_last" and rows["NCHW"]["settings"] == "NCHW"
    first = rows["trainer default"]["first_loss"]
    for name in ("NCHW", "channels_last", "classifier step unfused"):
        assert rows[name]["img_s"] > 0 and abs(rows[name]["first_loss"] - first) <= 1e-5 * first, name
    assert "eager plain loop" in proc.stdout and "not run: needs CUDA" in proc.stdout


@pytest.mark.parametrize("ranks", [2])
def test_sharded_classifier_script_on_cpu(ranks):
    proc = mpirun(ranks, [str(ROOT / "bench" / "gpu_classifier.py"), "--classes", "50", "--embedding", "32",
                          "--batch", "8"], timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = sorted(line for line in proc.stdout.splitlines() if line.startswith("rank "))
    assert len(lines) == ranks and all(line.endswith("  ok") for line in lines)
    assert lines[0].startswith("rank 0 on cpu (gloo group), classes 0..24: loss max |diff|")


def test_the_crossdevice_path_runs_on_cpu(tmp_path, capsys):
    """The cross-device check's run (SCAFFOLD's states and Krum's uploads point to point) under mpirun on the
    CPU, as the check runs it where there is no GPU."""
    args = SimpleNamespace(out=tmp_path, no_gpu=True)
    outcome = gpu_check.crossdevice_scaffold_krum(args)
    assert outcome.status == "PASS", outcome.lines
    assert outcome.lines[-1] == "3 ranks on cpu, 2 rounds, exit 0"
