"""`python -m jobs.hsu_gpu` (`make hsu-gpu`): Hsu et al. at the paper's client size on one GPU, with what decides
the GPU defaults, in one command of at most BUDGET_S seconds (docs/GPU.md):

  (a) `python -m bench.gpu_check --only speed-ir50 speed-ir100`: the speed table's rows (which trainer options pay);
  (b) `python -m bench.clients --device cuda --skip-rounds`: the vectorised cohort against the client loop;
  (c) FedAvg and FedAvgM (beta 0.9) at alpha = 100 and 0, C = 0.1, M = 100 clients of 500 synthetic images, B = 64,
      E = 1, on one trainer rank (`python -m jobs.reproduce hsu-long --scale gpu`, at the eta_eff the CPU's long
      stage chose): a probe of PROBE_ROUNDS rounds times a round, and the four runs get as many rounds as the
      time left allows.

It writes the results file (default docs/results/hsu_gpu.md): the four runs' tables and figure
(fedmpi/analysis/hsu_long_report.py) and, below them, what (a) and (b) printed. `--plan` prints the commands and
runs nothing; `--scale tiny` runs (c) at the tiny scale on the CPU (a pipeline check: (a) and (b) need a GPU and
are skipped where none is)."""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

BUDGET_S = 530.0          # under the 9 minutes a device check may take, with room for the machine's start
SPEED_S, CLIENTS_S = 260.0, 90.0
PROBE_ROUNDS, RUNS = 10, 4
MARGIN = 1.2              # a run's start, its evaluations and the report beside its rounds


def plan(scale: str, folder: Path, out: Path, rounds: int | None = None) -> list[tuple[str, list[str], float]]:
    """(what, argv, its seconds at most) of each part, in order; rounds None: the probe's count."""
    py = sys.executable
    study = [py, "-m", "jobs.reproduce", "hsu-long", "--scale", scale, "--folder", str(folder), "--out", str(out),
             f"data.root={folder / 'data'}"]
    parts = []
    if scale != "tiny":
        parts += [("speed", [py, "-m", "bench.gpu_check", "--only", "speed-ir50", "speed-ir100"], SPEED_S),
                  ("cohort", [py, "-m", "bench.clients", "--device", "cuda", "--skip-rounds"], CLIENTS_S)]
    if rounds is not None:
        parts.append(("hsu", [*study, f"clients.rounds={rounds}", f"eval.every={max(rounds // 10, 1)}"], 0.0))
    return parts


def rounds_that_fit(seconds_left: float, round_s: float, runs: int = RUNS, step: int = 10) -> int:
    """The most rounds (a multiple of `step`, at least `step`) that `runs` runs of `round_s` a round fit in
    `seconds_left`, with MARGIN for each run's start and evaluations."""
    fit = int(seconds_left / (runs * round_s * MARGIN))
    return max(step, fit - fit % step)


def probe_round_s(scale: str, folder: Path) -> float:
    """Seconds a round of the stage's first run, from a probe of PROBE_ROUNDS rounds (rounds after the first)."""
    import numpy as np

    from fedmpi.store.h5log import LogReader
    from jobs.hsu_long import SCALES, study
    from jobs.mpirun import mpirun

    spec = study(SCALES[scale])[0]
    log_dir = folder / "probe"
    args = ["-m", "fedmpi.run", "--config", spec.config, *spec.overrides, f"clients.rounds={PROBE_ROUNDS}",
            f"eval.every={PROBE_ROUNDS}", f"data.root={folder / 'data'}", f"log.dir={log_dir}", "log.name=probe"]
    ranks = 1 + int(next(o for o in reversed(spec.overrides) if o.startswith("clients.ranks=")).split("=")[1])
    proc = mpirun(ranks, args, timeout=300)
    if proc.returncode:
        raise SystemExit(f"the probe failed:\n{proc.stderr[-2000:]}")
    with LogReader(log_dir / "probe" / "log.h5") as log:
        return float(np.mean(log.table("rounds")["round_time"][1:]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.hsu_gpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="gpu", choices=("gpu", "tiny"))
    parser.add_argument("--folder", type=Path, default=Path("docs/results/hsu-gpu"))
    parser.add_argument("--out", type=Path, default=Path("docs/results/hsu_gpu.md"))
    parser.add_argument("--budget-s", type=float, default=BUDGET_S)
    parser.add_argument("--plan", action="store_true", help="print the commands; run nothing")
    args = parser.parse_args(argv)
    started = time.monotonic()
    if args.plan:
        for what, cmd, limit in plan(args.scale, args.folder, args.out, rounds=0):
            print(f"{what}: {' '.join(cmd[1:])}" + (f"  (at most {limit:.0f} s)" if limit else
                                                     "  (clients.rounds: as many as fit, from a probe)"))
        return 0
    printed = []
    for what, cmd, limit in plan(args.scale, args.folder, args.out):
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
            printed.append((what, " ".join(cmd[1:]), proc.returncode, proc.stdout + proc.stderr))
        except subprocess.TimeoutExpired as exc:   # its part of the 9 minutes is spent: the runs still get theirs
            output = (exc.stdout or b"").decode() + (exc.stderr or b"").decode()
            printed.append((what, " ".join(cmd[1:]), 124, output + f"\n(stopped after {limit:.0f} s)"))
    round_s = probe_round_s(args.scale, args.folder)
    rounds = rounds_that_fit(args.budget_s - (time.monotonic() - started), round_s)
    print(f"a round: {round_s:.3f} s (probe of {PROBE_ROUNDS}); each run: {rounds} rounds", file=sys.stderr)
    code = subprocess.run(plan(args.scale, args.folder, args.out, rounds)[-1][1]).returncode
    append_printed(args.out, printed, round_s, rounds)
    return code or max((p[2] for p in printed), default=0)


def append_printed(out: Path, printed: list, round_s: float, rounds: int) -> None:
    """Add what (a) and (b) printed, and the probe, to the generated part of the results file."""
    from fedmpi.analysis.fedface_report import HAND_WRITTEN

    text = out.read_text()
    head, sep, tail = text.partition(HAND_WRITTEN)
    lines = ["## What sized the runs", "", f"A probe of {PROBE_ROUNDS} rounds took {round_s:.3f} s a round; each "
             f"run got {rounds} rounds.", ""]
    for what, cmd, code, output in printed:
        lines += [f"## `python {cmd}` (exit {code})", "", "```", output.strip()[-6000:], "```", ""]
    out.write_text(head.rstrip() + "\n\n" + "\n".join(lines) + "\n" + sep + tail)


if __name__ == "__main__":
    sys.exit(main())
