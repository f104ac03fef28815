"""Benchmark: what glibc's malloc settings cost one CPU trainer step. For each setting a fresh process
(glibc reads its tunables at start) builds the model, runs STEPS forward + backward steps of IR-18 at 112 px, batch
8 (--model cifar: McMahan's CNN at 32 px, batch 64, a cross-device client's step), one thread, and prints: the anonymous memory the steps add over the model at their peak, the minor page faults
per step and the median step's CPU time (user + system).

    python -m bench.malloc_step [--steps 12] [--repeat 2] [--model ir18|cifar]

Settings: glibc's defaults (FEDMPI_MALLOC=default), a fixed 1 MB mmap threshold, what fedmpi.run uses where
memory is short (fedmpi/core/malloc.py: a fixed 2 MB threshold with transparent huge pages for the mappings), and
what a cross-device CPU rank sets at run time (keep_freed_buffers: a 32 MB threshold, the heap trimmed above 256 MB).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from fedmpi.core.malloc import TUNABLES, keep_freed_buffers

KEPT = "kept (cross-device CPU rank)"
SETTINGS = {"glibc defaults": "", "mmap threshold 1 MB": "glibc.malloc.mmap_threshold=1048576",
            "fedmpi.run (2 MB + huge pages)": TUNABLES, KEPT: ""}


def child(steps: int, model: str = "ir18", keep: bool = False) -> dict:
    import resource
    import threading
    import time

    import torch

    from fedmpi.models.iresnet import iresnet

    def anon_mb() -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) // 1024 for line in f if line.startswith("RssAnon"))

    torch.set_num_threads(1)
    if keep and not keep_freed_buffers():
        raise SystemExit("keep_freed_buffers() did not apply: FEDMPI_MALLOC or the C library")
    if model == "cifar":
        from fedmpi.models.cifar_cnn import CifarCNN
        net, x = CifarCNN(), torch.randn(64, 3, 32, 32)
    else:
        net = iresnet("ir18", embedding_size=512, input_size=112, width=1.0, dropout=0.0)
        x = torch.randn(8, 3, 112, 112)
    base, peak, done = anon_mb(), [0], threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], anon_mb())
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    faults0, times = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, []
    for _ in range(steps):
        started = time.thread_time()
        net(x).square().mean().backward()
        for p in net.parameters():
            p.grad = None
        times.append(time.thread_time() - started)
    done.set()
    watcher.join()
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0) // steps
    return {"added_mb": peak[0] - base, "faults": faults, "step_s": sorted(times)[len(times) // 2]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=2, help="runs of each setting, interleaved")
    parser.add_argument("--model", default="ir18", choices=("ir18", "cifar"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--keep", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.steps, args.model, args.keep)))
        return 0
    shape = "McMahan's CNN, 32 px, batch 64" if args.model == "cifar" else "IR-18, 112 px, batch 8"
    print(f"{shape}, one thread, {args.steps} steps a run, {args.repeat} runs a setting")
    print(f"{'setting':32s} {'added MB':>9s} {'faults/step':>12s} {'step s':>7s}")
    for _ in range(args.repeat):
        for name, tunables in SETTINGS.items():
            env = {**os.environ, "GLIBC_TUNABLES": tunables, "OMP_NUM_THREADS": "1"}
            env.pop("FEDMPI_MALLOC", None)
            out = subprocess.run([sys.executable, "-m", "bench.malloc_step", "--child", "--steps", str(args.steps),
                                  "--model", args.model, *(["--keep"] if name == KEPT else [])],
                                 env=env, capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{name:32s} {r['added_mb']:9d} {r['faults']:12d} {r['step_s']:7.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
