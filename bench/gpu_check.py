"""The GPU path, checked in one command: `make gpu-check` or `python -m bench.gpu_check` (docs/GPU.md says what it
can and cannot show on one GPU).

Made for one GPU machine (one GPU, 16 cores) and at most 8 minutes (--budget-s, default 470: a check that would
start after it is reported as not run, which fails). Prints each check's figures and PASS / FAIL / SKIP, then a
table (path, result, time); exits non-zero when any check fails or was not run.

On the GPU only (SKIP, with one line saying why, where torch sees no CUDA device):
  speed-ir50, speed-ir100
      the speed table (bench/gpu_speed.py): the eager plain loop (bf16 autocast, NCHW, torch.optim.SGD) against
      the trainer (silo/trainer.py) as configured by default and with each option of its step (channels_last,
      fp16, BatchNorm in fp32, CUDA graphs, torch.compile, ...), 112 px, batch 128, images resident on the GPU:
      img/s, ms a step, x plain, peak memory, % of the GPU's dense bf16 peak, the first step's seconds; rows as
      the check's share of the budget allows (--full: all, max-autotune too). IR-50 also: the loss after 200
      steps against the plain loop's from the same weights and batches (within 1 %), and the step fed end to end
      from the RecordIO on local disk through the real loader (decoder cpu and gpu) against resident images.
      PASS: the trainer's default at least the plain loop's speed (0.98x) and, for IR-50, the losses within 1 %;
      the goals (1.5x IR-50, 1.4x IR-100, end to end >= 0.95x) are reported, met or not
  sharded-classifier
      2 ranks on the one GPU (gloo for their group: NCCL refuses two ranks on one GPU) run the sharded ArcFace
      classifier on CUDA in fp32; its loss and gradients equal the full classifier's on CPU within fp32
      tolerance (bench/gpu_classifier.py)
The run's GPU paths, `mpirun ... python -m fedmpi.run` with every rank on the one GPU (so every group is gloo,
said in the run's output), on CUDA tensors; where no GPU is, the same runs on the CPU, scaled down:
  silo-dp-fp16-sharded
      server + party a (2 ranks: fp16 with dynamic loss scaling, the sharded classifier over the two) + party b;
      DP-FedAvg's Gaussian mean at the server; 2 DataLoader workers a rank (forkserver; none on CPU); 3 rounds
      end with a finite Θ
  crossdevice-scaffold-krum
      server + 2 trainer ranks, SCAFFOLD (each client's state sent and returned point to point) with Krum
      (every client's upload point to point into its row); 3 rounds (2 on CPU)
  fv-dedicated-resume
      server + 2 one-rank parties + 1 dedicated validator, run.deterministic=true, bf16, one FV iteration a
      round, 8 rounds (4 on CPU): sent SIGUSR1 after round 2 (it checkpoints at the next round boundary and
      exits 75) and continued with `--resume auto`, it ends bitwise equal (final Θ, losses, FV weights) to the
      uninterrupted run; FV's candidates after the resume are built from the restored θ' and sent to the
      validator
On the machine's cores (CUDA hidden from the ranks), scaled down unless --full:
  startup   `python -m bench.startup --ranks 5 --repeats 1 --no-probe` (--full: 17 ranks, probed)
  fv-pin    `python -m bench.fv --pin --rounds 4` (FV overhead with the validators on cores of their own;
            --full: its default rounds)

    python -m bench.gpu_check [--full] [--budget-s 470] [--only NAME ...] [--out /tmp/gpu_check]
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from jobs.mpirun import mpi_env, mpirun_binary

ROOT = Path(__file__).resolve().parents[1]

THROUGHPUT_GOAL = 0.98
SPEED_GOALS = {"ir50": 1.5, "ir100": 1.4}     # the trainer's default over the eager plain loop
FULL_SCALE_CORES = 8
CPU_ONLY = {"CUDA_VISIBLE_DEVICES": ""}


@dataclass
class Outcome:
    status: str                 # PASS | FAIL | SKIP
    lines: list[str]


@dataclass
class Check:
    name: str
    where: str                  # gpu: needs the GPU | path: on the GPU, else on the CPU scaled down | cpu
    run: Callable[[argparse.Namespace], Outcome]
    estimate_s: float           # what it takes on the GPU machine, for the budget


def gpu_missing() -> str | None:
    """Why the GPU checks cannot run here, or None when they can."""
    try:
        import torch
    except ImportError as exc:
        return f"torch cannot be imported ({exc})"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is False)"
    return None


def bitwise_verdict(differences: list[str]) -> Outcome:
    if differences:
        return Outcome("FAIL", [f"differs: {d}" for d in differences])
    return Outcome("PASS", ["the resumed run ends bitwise equal to the uninterrupted one"])


def run_command(cmd: list[str], timeout: float, env: dict | None = None, cwd: Path = ROOT) -> tuple[int, str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                              env=mpi_env({"PYTHONPATH": str(ROOT), **(env or {})}))
    except subprocess.TimeoutExpired as exc:
        return 124, f"timed out after {timeout:.0f} s\n{(exc.stdout or b'')[-2000:]!r}"
    return proc.returncode, proc.stdout + proc.stderr


def mpirun(n: int, args: list[str], timeout: float, env: dict | None = None) -> tuple[int, str]:
    return run_command([mpirun_binary(), "--oversubscribe", "--bind-to", "none", "-n", str(n), sys.executable,
                        *args], timeout, env)


# ---------------------------------------------------------------- throughput


def throughput(backbone: str, args) -> Outcome:
    """The speed table of `backbone` (bench/gpu_speed.py, in a process of its own)."""
    import json

    ir50 = backbone == "ir50"
    budget = 100 if ir50 else 30
    out_json = args.out / f"speed-{backbone}.json"
    options = ["--backbone", backbone, "--steps", str(args.steps), "--repeats", str(args.repeats),
               "--budget-s", str(10_000 if args.full else budget), "--data-root", str(args.out / "data"),
               "--json", str(out_json)]
    if args.full:
        options.append("--full")
    if ir50:
        options += ["--loss-steps", "200", "--end-to-end"]
    code, out = run_command([sys.executable, "-m", "bench.gpu_speed", *options], timeout=900 if args.full else 400)
    lines = [line for line in out.splitlines() if line.strip() and not line.startswith(("W1", "[rank"))]
    if code:
        return Outcome("FAIL", [f"exit status {code}", *lines[-20:]])
    return speed_verdict(json.loads(out_json.read_text()), lines)


def speed_verdict(result: dict, lines: list[str]) -> Outcome:
    """PASS: the trainer's default not slower than the plain loop (0.98x) and the losses within 1 %; the goals
    said, met or not."""
    rows = {r["name"]: r for r in result["rows"] if "img_s" in r}
    ratio = rows["trainer default"]["img_s"] / rows["eager plain loop"]["img_s"]
    goal = SPEED_GOALS.get(result["backbone"], 1.0)
    notes = [f"goal {goal}x the eager plain loop: {'met' if ratio >= goal else 'NOT met'} ({ratio:.3f}x)"]
    ok = ratio >= THROUGHPUT_GOAL
    if "loss" in result:
        apart = abs(result["loss"]["trainer"] - result["loss"]["plain"]) / result["loss"]["plain"]
        ok = ok and apart <= 0.01
    for row in result.get("end_to_end", [])[1:]:
        share = row["img_s"] / result["end_to_end"][0]["img_s"]
        notes.append(f"goal end to end >= 0.95x ({row['name']}): {'met' if share >= 0.95 else 'NOT met'} "
                     f"({share:.3f}x)")
    return Outcome("PASS" if ok else "FAIL", [*lines, *notes])


# ---------------------------------------------------------------- sharded classifier


def sharded_classifier(args) -> Outcome:
    code, out = mpirun(2, [str(ROOT / "bench" / "gpu_classifier.py")], timeout=240)
    lines = [line for line in out.splitlines() if line.strip()][-8:]
    return Outcome("PASS" if code == 0 else "FAIL", lines)


# ---------------------------------------------------------------- the run's GPU paths, every rank on the one GPU


PARTY = "{{name: {name}, ranks: {ranks}, data: {{kind: synthetic, style: {style}, identities: {ids}, images_per_identity: 8}}}}"
SMALL_MODEL = "model: {backbone: ir18, width: 0.25, embedding_size: 64, scale: 32.0%s}\n"

SILO_DP_CONFIG = ("parties:\n"
                  f"  - {PARTY.format(name='a', ranks=2, style='ms1m', ids=24)}\n"
                  f"  - {PARTY.format(name='b', ranks=1, style='ga', ids=16)}\n"
                  "data: {image_size: 32, workers: 0, val_sets: [lfw], val_pairs_per_fold: 20}\n"
                  + SMALL_MODEL % ", classifier: sharded" +
                  "optim: {lr: 0.1, batch_size: 16, epochs: 1, steps_per_epoch: 6, milestones: [], amp: fp16}\n"
                  "fed: {algorithm: fedavg, K: 2, dp: {enabled: true, clip: 1.0, noise_multiplier: 0.5}}\n"
                  "fv: {enabled: false}\n"
                  "eval: {every: 0}\n")

RESUME_CONFIG = ("parties:\n"
                 f"  - {PARTY.format(name='a', ranks=1, style='ms1m', ids=24)}\n"
                 f"  - {PARTY.format(name='b', ranks=1, style='ga', ids=16)}\n"
                 "data: {image_size: 32, workers: 0, val_sets: [lfw, cfp_fp], val_pairs_per_fold: 20}\n"
                 + SMALL_MODEL % "" +
                 "optim: {lr: 0.1, batch_size: 16, epochs: 1, steps_per_epoch: 16, milestones: [], amp: bf16}\n"
                 "fed: {algorithm: pfm, K: 2}\n"
                 "fv: {enabled: true, placement: dedicated, validators: 1, iterations_per_round: 1}\n"
                 "run: {deterministic: true}\n"
                 "checkpoint: {every: 2, keep: 2}\n")

CROSSDEVICE = ["--config", str(ROOT / "configs" / "hsu_cifar10.yaml"), "clients.population=6", "clients.images=12",
               "clients.train_images=80", "clients.test_images=40", "clients.fraction=0.5", "clients.alpha=0.5",
               "optim.batch_size=5", "optim.lr=0.05", "eval.every=0", "clients.ranks=2", "fed.algorithm=scaffold",
               "fed.aggregation.rule=krum", "fed.aggregation.f=0"]


def device_of(args) -> str:
    """Where the path checks run: the GPU, or (no GPU here) the CPU, scaled down."""
    return "cpu" if args.no_gpu else "cuda"


def write_config(args, name: str, text: str) -> Path:
    base = args.out / name
    base.mkdir(parents=True, exist_ok=True)
    (base / "config.yaml").write_text(text)
    return base / "config.yaml"


def run_args(args, base: Path, name: str, config: list[str]) -> list[str]:
    return ["-m", "fedmpi.run", *config, f"data.root={args.out / 'data'}", f"run.device={device_of(args)}",
            f"log.dir={base}", f"log.name={name}", f"run.save_final={base / name / 'final.pt'}"]


def finished(base: Path, name: str, rounds: int) -> list[str]:
    """What is wrong with a finished run: its final Θ not finite, its log short of `rounds` rounds."""
    import h5py
    import torch

    problems = []
    theta = torch.load(base / name / "final.pt")["theta"]
    if not bool(torch.isfinite(theta).all()):
        problems.append("the final theta is not finite")
    with h5py.File(base / name / "log.h5", "r") as f:
        logged = len(f["rounds"]["loss"])
    if logged != rounds:
        problems.append(f"{logged} rounds logged, expected {rounds}")
    return problems


def one_run(args, name: str, ranks: int, config: list[str], rounds: int) -> Outcome:
    base = args.out / name
    base.mkdir(parents=True, exist_ok=True)
    stamp = f"run-{time.strftime('%H%M%S')}"
    code, out = mpirun(ranks, run_args(args, base, stamp, config), timeout=240)
    notes = [line for line in out.splitlines() if line.startswith("note: group")]
    if code:
        return Outcome("FAIL", [*notes, f"exit status {code}:", *out.splitlines()[-12:]])
    problems = finished(base, stamp, rounds)
    return Outcome("FAIL" if problems else "PASS",
                   [*notes, *problems, f"{ranks} ranks on {device_of(args)}, {rounds} rounds, exit 0"])


def silo_dp_fp16_sharded(args) -> Outcome:
    """DP-FedAvg's Gaussian mean at the server; party a's 2 ranks (sharing the GPU: gloo) train fp16 with the
    sharded classifier, the overflow check reduced over them; 3 rounds."""
    config = ["--config", str(write_config(args, "silo-dp", SILO_DP_CONFIG))]
    if not args.no_gpu:     # DataLoader workers, started by forkserver beside CUDA and NCCL (2 a rank on a GPU)
        config.append("data.workers=2")
    return one_run(args, "silo-dp", 4, config, rounds=3)


def crossdevice_scaffold_krum(args) -> Outcome:
    """The cross-device exchange with per-client state (SCAFFOLD) and every upload kept for Krum: the states and
    uploads point to point (through host memory on gloo, in the trainer's send order), Krum on the uploads."""
    rounds = 2 if args.no_gpu else 3
    return one_run(args, "crossdevice", 3, [*CROSSDEVICE, f"clients.rounds={rounds}"], rounds=rounds)


def stopped_at_round(args: list[str], after: str, timeout: float, ranks: int) -> tuple[int, str]:
    """A run sent SIGUSR1 (through mpirun, as a user or Slurm would) when its output shows `after`: it
    checkpoints at the next round boundary and exits 75."""
    cmd = [mpirun_binary(), "--oversubscribe", "--bind-to", "none", "-n", str(ranks), sys.executable, *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env=mpi_env({"PYTHONPATH": str(ROOT)}))
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    lines, sent = [], False
    for line in proc.stdout:
        lines.append(line)
        if not sent and line.startswith(after):
            proc.send_signal(signal.SIGUSR1)
            sent = True
    timer.cancel()
    return proc.wait(), "".join(lines)


def compare_runs(a: Path, b: Path) -> list[str]:
    """What differs between two finished runs: final Θ, per-round losses, FV weights."""
    import h5py
    import numpy as np
    import torch

    differences = []
    ta, tb = torch.load(a / "final.pt"), torch.load(b / "final.pt")
    if not torch.equal(ta["theta"], tb["theta"]):
        differences.append(f"final theta (max |diff| {(ta['theta'] - tb['theta']).abs().max().item():.3e})")
    with h5py.File(a / "log.h5", "r") as fa, h5py.File(b / "log.h5", "r") as fb:
        for table, column in (("rounds", "loss"), ("fv", "w")):
            if table in fa and not np.array_equal(fa[table][column][()], fb[table][column][()]):
                differences.append(f"{table}/{column}")
    return differences


def fv_dedicated_resume(args) -> Outcome:
    """Server + 2 one-rank parties + 1 dedicated validator, run.deterministic, bf16, one FV iteration a round,
    8 rounds: sent SIGUSR1 after round 2 (a checkpoint at the next round boundary, exit 75) and continued with
    `--resume auto`, FV's first iteration after the resume builds its candidates from the restored θ' on the
    device and sends them to the validator; the run ends bitwise equal (final Θ, losses, FV weights) to the
    uninterrupted one."""
    config = ["--config", str(write_config(args, "resume", RESUME_CONFIG))]
    if args.no_gpu:
        config.append("optim.steps_per_epoch=8")     # 4 rounds
    base = args.out / "resume"
    stamp = time.strftime("%H%M%S")
    whole, cut = f"whole-{stamp}", f"cut-{stamp}"
    code, out = mpirun(4, run_args(args, base, whole, config), timeout=240)
    if code:
        return Outcome("FAIL", ["the uninterrupted run failed:", *out.splitlines()[-10:]])
    lines = [line for line in out.splitlines() if line.startswith("note: group")]
    code, out = stopped_at_round(run_args(args, base, cut, config), after="round 2/",
                                 timeout=240, ranks=4)
    if code != 75:
        return Outcome("FAIL", [*lines, f"the run sent SIGUSR1 after round 2 exited {code}, not 75 (preempted):",
                                *out.splitlines()[-10:]])
    code, out = mpirun(4, [*run_args(args, base, cut, config), "--resume", "auto"], timeout=240)
    if code:
        return Outcome("FAIL", [*lines, "the resumed run failed:", *out.splitlines()[-10:]])
    verdict = bitwise_verdict(compare_runs(base / whole, base / cut))
    return Outcome(verdict.status, [*(lines or ["(no group fell back to gloo)"]), *verdict.lines])


# ---------------------------------------------------------------- the CPU benchmarks


def cpu_benchmark(name: str, options: list[str], timeout: float) -> Outcome:
    code, out = run_command([sys.executable, "-m", f"bench.{name}", *options], timeout, env=CPU_ONLY)
    lines = [line for line in out.splitlines() if line.strip()]
    return Outcome("PASS" if code == 0 else "FAIL", lines[-12:] if code == 0 else lines[-20:])


def startup(args) -> Outcome:
    options = ["--ranks", "5", "--repeats", "1", "--no-probe"] if args.small else ["--ranks", "17", "--repeats", "1"]
    return cpu_benchmark("startup", [*options, "--out", str(args.out / "startup")], timeout=300)


def fv_pin(args) -> Outcome:
    options = ["--pin", *(["--rounds", "4"] if args.small else []), "--out", str(args.out / "fv")]
    return cpu_benchmark("fv", options, timeout=300)


CHECKS = [
    Check("speed-ir50", "gpu", lambda a: throughput("ir50", a), 160),
    Check("speed-ir100", "gpu", lambda a: throughput("ir100", a), 40),
    Check("sharded-classifier", "gpu", sharded_classifier, 30),
    Check("silo-dp-fp16-sharded", "path", silo_dp_fp16_sharded, 30),
    Check("crossdevice-scaffold-krum", "path", crossdevice_scaffold_krum, 25),
    Check("fv-dedicated-resume", "path", fv_dedicated_resume, 75),
    Check("startup", "cpu", startup, 40),
    Check("fv-pin", "cpu", fv_pin, 70),
]


def table(rows: list[tuple[str, str, float]]) -> list[str]:
    """The summary table: path, result, time."""
    width = max([len("path"), *(len(name) for name, _, _ in rows)])
    result_width = max([len("result"), *(len(result) for _, result, _ in rows)])
    lines = [f"{'path':<{width}}  {'result':<{result_width}}  time"]
    lines += [f"{name:<{width}}  {result:<{result_width}}  {seconds:.0f} s" for name, result, seconds in rows]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="the CPU benchmarks scaled down (the default)")
    parser.add_argument("--full", action="store_true", help="every row of the speed tables (max-autotune too; "
                                                            "past the 8 minutes) and the CPU benchmarks at full "
                                                            "scale (17 ranks, 8 FV rounds), on a machine of at "
                                                            f"least {FULL_SCALE_CORES} cores")
    parser.add_argument("--budget-s", type=float, default=470.0, help="no check starts after this many seconds")
    parser.add_argument("--only", nargs="+", default=None, choices=[c.name for c in CHECKS])
    parser.add_argument("--steps", type=int, default=10, help="timed steps per stretch (speed table)")
    parser.add_argument("--repeats", type=int, default=2, help="timed stretches per row (speed table)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "gpu_check")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count() or 1
    if args.full and cores < FULL_SCALE_CORES:
        print(f"note: --full on {cores} cores: the CPU benchmarks will take long here")
    args.small = not args.full
    started = time.perf_counter()
    why_not = gpu_missing()
    args.no_gpu = why_not is not None
    if why_not:
        print(f"GPU checks skipped: {why_not}", flush=True)
        print("the run's GPU paths (" + ", ".join(c.name for c in CHECKS if c.where == "path") + ") run on the "
              "CPU instead, scaled down: they show the paths run and resume, not that they keep to a device "
              "(tests/unit/test_device_discipline.py does that without a GPU)", flush=True)
    results: list[tuple[str, str, float]] = []
    for check in CHECKS:
        if args.only and check.name not in args.only:
            continue
        if check.where == "gpu" and why_not:
            results.append((check.name, "SKIP (no GPU)", 0.0))
            continue
        spent = time.perf_counter() - started
        if spent + check.estimate_s > args.budget_s:
            print(f"NOT RUN {check.name}: {spent:.0f} s spent, about {check.estimate_s:.0f} s more would pass the "
                  f"budget of {args.budget_s:.0f} s", flush=True)
            results.append((check.name, "FAIL (not run)", 0.0))
            continue
        t0 = time.perf_counter()
        try:
            outcome = check.run(args)
        except Exception as exc:  # noqa: BLE001 - one check's failure is reported, the others still run
            outcome = Outcome("FAIL", [f"{type(exc).__name__}: {exc}"])
        seconds = time.perf_counter() - t0
        on = " (cpu)" if check.where == "path" and why_not else ""
        print(f"{outcome.status} {check.name}{on} ({seconds:.0f} s)", flush=True)
        for line in outcome.lines:
            print(f"    {line}", flush=True)
        results.append((check.name, outcome.status + on, seconds))
    print("", flush=True)
    for line in table(results):
        print(line, flush=True)
    failed = [name for name, result, _ in results if result.startswith("FAIL")]
    skipped = [name for name, result, _ in results if result.startswith("SKIP")]
    print(f"gpu-check: {len(results) - len(failed) - len(skipped)} passed, {len(failed)} failed"
          + (f" ({', '.join(failed)})" if failed else "") + (f", {len(skipped)} skipped (no GPU)" if skipped else "")
          + f", {time.perf_counter() - started:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
