"""Benchmark: the server's step on the stacked class embeddings of FedGC (its cross-client correction) and FedAwS
(its spreadout, every pair) for three parties of MS1M / Glint-Asia / VGGFace2-like size (85,742 / 20,000 / 9,000
identities by default) at d = 512, float32, one step each, in a process of its own (so that its peak memory is
its own): seconds, the process's peak resident memory above the stacked W it starts from, the multiply-adds the
step makes (its two matrix products) and the rate they ran at, and the time projected for a GPU from those
(--gpu-tflops, the rate a large float32 matrix product reaches there, and --gpu-bandwidth for the exponentials'
passes over each [rows, C] block). Prints figures, asserts nothing.

usage: python -m bench.class_steps [--rows 85742 20000 9000] [--dim 512] [--block 2048] [--steps fedgc fedaws]
                                   [--gpu-tflops 50] [--gpu-bandwidth 3000]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

import torch

from fedmpi.algorithms.class_steps import bounds_of
from fedmpi.algorithms.gradient_correction import correction_flops


def resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def stacked(rows: list[int], dim: int) -> torch.Tensor:
    """Rows of trained-looking class embeddings: random directions of norm about 1."""
    W = torch.randn(sum(rows), dim, generator=torch.Generator().manual_seed(0))
    return W.div_(math.sqrt(dim))


def flops(step: str, rows: list[int], dim: int) -> float:
    C = sum(rows)
    return correction_flops(rows, dim) if step == "fedgc" else 2 * 2 * dim * C * C


def exponential_bytes(step: str, rows: list[int]) -> float:
    """Bytes of the passes over each block's [rows, C] values besides the products (FedGC: the exponential, its
    sum, the division; FedAwS: the threshold and the sum of squares), float32."""
    C = sum(rows)
    values = sum(n * (C - n) for n in rows) if step == "fedgc" else C * C
    return 4 * values * (4 if step == "fedgc" else 3)


def one(step: str, rows: list[int], dim: int, block: int) -> dict:
    """Run one step here; its figures."""
    W = stacked(rows, dim)
    before = resident_mib()
    started = time.perf_counter()
    if step == "fedgc":
        from fedmpi.algorithms.gradient_correction import correction_step
        value = correction_step(W, bounds_of(rows), 0.1, 64.0, block)
    else:
        from fedmpi.algorithms.spreadout import spreadout_step
        value = spreadout_step(W, 0.1, 0.4, block=block)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"step": step, "seconds": seconds, "peak_mib": peak - before, "w_mib": W.numel() * 4 / 2**20,
            "value": value, "threads": torch.get_num_threads()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.class_steps", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[85742, 20000, 9000], help="identities per party")
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--block", type=int, default=2048, help="anchor rows per block (fed.options.block_rows)")
    parser.add_argument("--steps", nargs="+", default=["fedgc", "fedaws"], choices=["fedgc", "fedaws"])
    parser.add_argument("--gpu-tflops", type=float, default=50.0,
                        help="float32 matrix-product rate of the GPU to project for (TFLOP/s; default 50, about "
                             "three quarters of an H100/H200's float32 peak)")
    parser.add_argument("--gpu-bandwidth", type=float, default=3000.0, help="its memory bandwidth (GB/s)")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)   # the child: one step, figures as JSON
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, args.rows, args.dim, args.block)))
        return 0
    C = sum(args.rows)
    print(f"parties {' / '.join(map(str, args.rows))} identities, C = {C}, d = {args.dim}, float32, block "
          f"{args.block} anchor rows; stacked W {C * args.dim * 4 / 2**20:.0f} MiB; torch threads "
          f"{torch.get_num_threads()}")
    print(f"{'step':8} {'seconds':>9} {'peak MiB':>9} {'GFLOP':>9} {'GFLOP/s':>8} {'GPU s (proj.)':>14}")
    for step in args.steps:
        child = subprocess.run([sys.executable, "-m", "bench.class_steps", "--one", step, "--rows",
                                *map(str, args.rows), "--dim", str(args.dim), "--block", str(args.block)],
                               capture_output=True, text=True, check=True)
        figures = json.loads(child.stdout.strip().splitlines()[-1])
        work = flops(step, args.rows, args.dim)
        gpu = work / (args.gpu_tflops * 1e12) + exponential_bytes(step, args.rows) / (args.gpu_bandwidth * 1e9)
        print(f"{step:8} {figures['seconds']:9.1f} {figures['peak_mib']:9.0f} {work / 1e9:9.0f} "
              f"{work / 1e9 / figures['seconds']:8.1f} {gpu:14.2f}")
    print("peak MiB: the step's process at its peak, above the stacked W it was given; GPU s: its multiply-adds at "
          f"{args.gpu_tflops:g} TFLOP/s plus its passes over each block at {args.gpu_bandwidth:g} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
