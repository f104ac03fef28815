"""The GPU path, checked in one command (issue 23): `make gpu-check` or `python -m bench.gpu_check`.

Made for one GPU machine (one GPU, 16 cores) and at most 8 minutes (--budget-s, default 450: a check that would
start after it is reported as not run, which fails). Prints each check's figures and PASS / FAIL / SKIP; exits
non-zero when any check fails or was not run.

On the GPU (skipped, with one line saying why, where torch sees no CUDA device):
  throughput-ir50, throughput-ir18
      the trainer's step (silo/trainer.py: bf16 autocast, the rule's backbone step, the classifier's momentum
      SGD) against a plain PyTorch loop of the same model, head and batch (torch.optim.SGD, autocast, backward),
      IR-50 / IR-18 at 112 px, batch 128, on the same on-GPU batch; best of --repeats timed stretches each,
      alternating; goal trainer >= 0.98x plain; the peak GPU memory of each
  sharded-classifier
      2 ranks on the one GPU (gloo for their group: NCCL refuses two ranks on one GPU) run the sharded ArcFace
      classifier on CUDA in fp32; its loss and gradients equal the full classifier's on CPU within fp32
      tolerance (bench/gpu_classifier.py)
  resume-one-gpu
      `mpirun -n 3 python -m fedmpi.run` (server + 2 one-rank parties, all on the one GPU, so every group is
      gloo, said in the run's output), run.deterministic=true, bf16, FV with one iteration per round, 8 rounds:
      sent SIGUSR1 after round 2 (it checkpoints at the next round boundary and exits 75) and continued with
      `--resume auto`, it ends bitwise equal (final Θ, losses, FV weights) to the uninterrupted run
On the machine's cores (CUDA hidden from the ranks):
  startup   `python -m bench.startup --ranks 17 --repeats 1` (--small: 5 ranks, no probe)
  fv-pin    `python -m bench.fv --pin` (FV overhead with the validators on cores of their own; --small: 4 rounds)

    python -m bench.gpu_check [--small|--full] [--budget-s 450] [--only NAME ...] [--out /tmp/gpu_check]

--small (the default with fewer than 8 cores) scales the CPU benchmarks down to fit a 2-core machine.
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
FULL_SCALE_CORES = 8
CPU_ONLY = {"CUDA_VISIBLE_DEVICES": ""}


@dataclass
class Outcome:
    status: str                 # PASS | FAIL | SKIP
    lines: list[str]


@dataclass
class Check:
    name: str
    gpu: bool
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


def ratio_verdict(trainer: float, plain: float, goal: float = THROUGHPUT_GOAL) -> tuple[str, str]:
    """(PASS|FAIL, 'trainer X img/s vs plain Y img/s: Z x (goal >= G x)')."""
    ratio = trainer / plain if plain > 0 else float("nan")
    status = "PASS" if ratio >= goal else "FAIL"
    return status, f"trainer {trainer:.0f} img/s vs plain {plain:.0f} img/s: {ratio:.3f}x (goal >= {goal}x)"


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
    from bench.gpu_throughput import compare

    result = compare(backbone, batch=128, image_size=112, steps=args.steps, repeats=args.repeats,
                     data_root=args.out / "data")
    status, line = ratio_verdict(result["trainer"], result["plain"])
    return Outcome(status, [f"{backbone} 112 px bf16 batch 128: {line}",
                            f"peak GPU memory: trainer {result['trainer_peak_gb']:.2f} GB, plain "
                            f"{result['plain_peak_gb']:.2f} GB"])


# ---------------------------------------------------------------- sharded classifier


def sharded_classifier(args) -> Outcome:
    code, out = mpirun(2, [str(ROOT / "bench" / "gpu_classifier.py")], timeout=240)
    lines = [line for line in out.splitlines() if line.strip()][-8:]
    return Outcome("PASS" if code == 0 else "FAIL", lines)


# ---------------------------------------------------------------- a 3-rank run on one GPU, resumed


RESUME_CONFIG = """\
parties:
  - {name: a, ranks: 1, data: {kind: synthetic, style: ms1m, identities: 24, images_per_identity: 8}}
  - {name: b, ranks: 1, data: {kind: synthetic, style: ga, identities: 16, images_per_identity: 8}}
data: {image_size: 32, workers: 0, val_sets: [lfw, cfp_fp], val_pairs_per_fold: 20}
model: {backbone: ir18, width: 0.25, embedding_size: 64, scale: 32.0}
optim: {lr: 0.1, batch_size: 16, epochs: 1, steps_per_epoch: 16, milestones: [], amp: bf16}
fed: {algorithm: pfm, K: 2}
fv: {enabled: true, placement: server, iterations_per_round: 1}
run: {deterministic: true, device: cuda}
checkpoint: {every: 2, keep: 2}
"""


def stopped_at_round(args: list[str], after: str, timeout: float) -> tuple[int, str]:
    """A 3-rank run sent SIGUSR1 (through mpirun, as a user or Slurm would) when its output shows `after`: it
    checkpoints at the next round boundary and exits 75."""
    cmd = [mpirun_binary(), "--oversubscribe", "--bind-to", "none", "-n", "3", sys.executable, *args]
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


def resume_one_gpu(args) -> Outcome:
    base = args.out / "resume"
    base.mkdir(parents=True, exist_ok=True)
    (base / "config.yaml").write_text(RESUME_CONFIG)

    def run_args(name: str) -> list[str]:
        return ["--config", str(base / "config.yaml"), f"data.root={args.out / 'data'}", f"log.dir={base}",
                f"log.name={name}", f"run.save_final={base / name / 'final.pt'}"]

    stamp = time.strftime("%H%M%S")
    whole, cut = f"whole-{stamp}", f"cut-{stamp}"
    code, out = mpirun(3, ["-m", "fedmpi.run", *run_args(whole)], timeout=240)
    if code:
        return Outcome("FAIL", ["the uninterrupted run failed:", *out.splitlines()[-10:]])
    lines = [line for line in out.splitlines() if line.startswith("note: group")]
    code, out = stopped_at_round(["-m", "fedmpi.run", *run_args(cut)], after="round 2/", timeout=240)
    if code != 75:
        return Outcome("FAIL", [*lines, f"the run sent SIGUSR1 after round 2 exited {code}, not 75 (preempted):",
                                *out.splitlines()[-10:]])
    code, out = mpirun(3, ["-m", "fedmpi.run", *run_args(cut), "--resume", "auto"], timeout=240)
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
    Check("throughput-ir50", True, lambda a: throughput("ir50", a), 60),
    Check("throughput-ir18", True, lambda a: throughput("ir18", a), 40),
    Check("sharded-classifier", True, sharded_classifier, 30),
    Check("resume-one-gpu", True, resume_one_gpu, 90),
    Check("startup", False, startup, 90),
    Check("fv-pin", False, fv_pin, 120),
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="the CPU benchmarks scaled down (the default on "
                                                                 f"machines with fewer than {FULL_SCALE_CORES} cores)")
    parser.add_argument("--full", action="store_true", help="the CPU benchmarks at full scale on any machine")
    parser.add_argument("--budget-s", type=float, default=450.0, help="no check starts after this many seconds")
    parser.add_argument("--only", nargs="+", default=None, choices=[c.name for c in CHECKS])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per stretch (throughput)")
    parser.add_argument("--repeats", type=int, default=3, help="timed stretches per loop (throughput)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "gpu_check")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count() or 1
    if not args.full and not args.small and cores < FULL_SCALE_CORES:
        args.small = True
        print(f"CPU benchmarks scaled down (--small): {cores} cores here (--full to run them at full scale)")
    started = time.perf_counter()
    why_not = gpu_missing()
    if why_not:
        print(f"GPU checks skipped: {why_not}", flush=True)
    results = []
    for check in CHECKS:
        if args.only and check.name not in args.only:
            continue
        if check.gpu and why_not:
            results.append((check.name, "SKIP"))
            continue
        spent = time.perf_counter() - started
        if spent + check.estimate_s > args.budget_s:
            print(f"NOT RUN {check.name}: {spent:.0f} s spent, about {check.estimate_s:.0f} s more would pass the "
                  f"budget of {args.budget_s:.0f} s", flush=True)
            results.append((check.name, "FAIL"))
            continue
        t0 = time.perf_counter()
        try:
            outcome = check.run(args)
        except Exception as exc:  # noqa: BLE001 - one check's failure is reported, the others still run
            outcome = Outcome("FAIL", [f"{type(exc).__name__}: {exc}"])
        print(f"{outcome.status} {check.name} ({time.perf_counter() - t0:.0f} s)", flush=True)
        for line in outcome.lines:
            print(f"    {line}", flush=True)
        results.append((check.name, outcome.status))
    failed = [name for name, status in results if status == "FAIL"]
    skipped = [name for name, status in results if status == "SKIP"]
    print(f"gpu-check: {len(results) - len(failed) - len(skipped)} passed, {len(failed)} failed"
          + (f" ({', '.join(failed)})" if failed else "") + (f", {len(skipped)} skipped (no GPU)" if skipped else "")
          + f", {time.perf_counter() - started:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
