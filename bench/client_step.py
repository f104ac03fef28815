"""Benchmark: one cross-device client's SGD step of McMahan's CIFAR CNN (batch 64, 32 px, one thread, the freed
buffers kept as a cross-device CPU rank keeps them, core/malloc.py) and one test batch's scoring (batch 100, no
gradient), with torch's LocalResponseNorm or fedmpi's fused one (models/lrn.py), in NCHW and NHWC. The forms run
interleaved, `--repeat` times; each prints the median of its steps, seconds.

    python -m bench.client_step [--steps 30] [--repeat 3]
"""
from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.nn.functional as F

from fedmpi.core.malloc import keep_freed_buffers
from fedmpi.models.cifar_cnn import CifarCNN
from fedmpi.models.lrn import fuse_local_response_norms

FORMS = {"NCHW, torch's LRN": (False, False), "NCHW, fused LRN": (False, True),
         "NHWC, torch's LRN": (True, False), "NHWC, fused LRN (fedmpi's CPU clients)": (True, True)}


def _median(times: list[float]) -> float:
    return sorted(times)[len(times) // 2]


def timings(nhwc: bool, fused: bool, steps: int) -> tuple[float, float]:
    """(median training step, median scoring batch) of one form, after 3 steps of warm-up."""
    torch.manual_seed(0)
    net = CifarCNN()
    if fused:
        fuse_local_response_norms(net)
    layout = torch.channels_last if nhwc else torch.contiguous_format
    net = net.to(memory_format=layout)
    x, y = torch.randn(64, 3, 32, 32).contiguous(memory_format=layout), torch.randint(0, 10, (64,))
    test = torch.randn(100, 3, 32, 32).contiguous(memory_format=layout)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    train, score = [], []
    for i in range(steps + 3):
        started = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
        train.append(time.perf_counter() - started)
        started = time.perf_counter()
        with torch.no_grad():
            net(test).argmax(1)
        score.append(time.perf_counter() - started)
    return _median(train[3:]), _median(score[3:])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each form, interleaved")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    keep_freed_buffers()
    print(f"McMahan's CNN, one thread, {args.steps} steps a run, {args.repeat} runs a form")
    print(f"{'form':40s} {'step s':>7s} {'score s':>8s}")
    for _ in range(args.repeat):
        for name, (nhwc, fused) in FORMS.items():
            step, score = timings(nhwc, fused, args.steps)
            print(f"{name:40s} {step:7.4f} {score:8.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
