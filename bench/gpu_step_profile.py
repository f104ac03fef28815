"""Where the trainer's step spends its GPU time beside a plain PyTorch loop (the pair bench/gpu_throughput.py times):
torch.profiler over the same steps of each, then the kernels (CUDA time per step, calls per step) whose time
differs most between the two. Needs CUDA.

    python -m bench.gpu_step_profile [--backbone ir50] [--batch 128] [--steps 10] [--top 15]
"""
from __future__ import annotations

import argparse
from pathlib import Path


def kernel_times(step, steps: int) -> dict[str, tuple[float, float]]:
    """{kernel or op name: (CUDA ms per step, calls per step)} over `steps` profiled steps after 3 warm-ups."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    times: dict[str, tuple[float, float]] = {}
    for event in prof.key_averages():
        device_us = getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0)
        if device_us > 0:
            ms, calls = times.get(event.key, (0.0, 0.0))
            times[event.key] = (ms + device_us / 1000 / steps, calls + event.count / steps)
    return times


def main(argv=None) -> int:
    import torch

    from bench.gpu_throughput import both_steps

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbone", default="ir50")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--data-root", type=Path, default=Path("/tmp/gpu_check/data"))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_step_profile: torch sees no CUDA device")
        return 1
    steps_of = both_steps(args.backbone, args.batch, 112, args.data_root)
    sides = {name: kernel_times(step, args.steps) for name, step in steps_of.items()}
    for name, times in sides.items():
        print(f"{name}: {sum(ms for ms, _ in times.values()):.2f} ms of CUDA time a step, "
              f"{sum(calls for _, calls in times.values()):.0f} kernels and copies a step")
    keys = set(sides["trainer"]) | set(sides["plain"])
    gap = sorted(keys, key=lambda k: -abs(sides["trainer"].get(k, (0, 0))[0] - sides["plain"].get(k, (0, 0))[0]))
    print(f"{'ms/step trainer':>15} {'plain':>8} {'calls t':>8} {'p':>6}  kernel")
    for key in gap[:args.top]:
        (tm, tc), (pm, pc) = sides["trainer"].get(key, (0, 0)), sides["plain"].get(key, (0, 0))
        print(f"{tm:15.3f} {pm:8.3f} {tc:8.1f} {pc:6.1f}  {key[:110]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
