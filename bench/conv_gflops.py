"""Single-core conv2d throughput of this machine, to put beside wall times measured on it (machines differ):
the 3x3 convolutions of an IR-18 forward, at the demo's size (width 0.25, 32 px, the FV/evaluation batch of 128)
and at the paper's (width 1, 112 px, batch 8), one thread, float32.

    python -m bench.conv_gflops [--repeats 20] [--threads 1]

Prints the CPU model and GFLOP/s per shape (2 x N x C_out x H_out x W_out x C_in x 9 per call: a multiply and an
add per weight per output value); asserts nothing.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time

# (label, batch, C_in, C_out, H=W, stride)
SHAPES = [
    ("demo stage 1 (16 ch, 32 px, batch 128)", 128, 16, 16, 32, 1),
    ("demo stage 3 (64 ch, 8 px, batch 128)", 128, 64, 64, 8, 1),
    ("paper stage 1 (64 ch, 56 px, batch 8)", 8, 64, 64, 56, 1),
    ("paper stage 3 (256 ch, 14 px, batch 8)", 8, 256, 256, 14, 1),
]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gflops(batch: int, c_in: int, c_out: int, size: int, stride: int, repeats: int) -> float:
    import torch

    x = torch.randn(batch, c_in, size, size)
    w = torch.randn(c_out, c_in, 3, 3)
    out = size // stride
    flop = 2.0 * batch * c_out * out * out * c_in * 9
    with torch.no_grad():
        for _ in range(3):  # warm-up: the first calls pick the kernel and fault in the buffers
            torch.nn.functional.conv2d(x, w, stride=stride, padding=1)
        started = time.perf_counter()
        for _ in range(repeats):
            torch.nn.functional.conv2d(x, w, stride=stride, padding=1)
        seconds = time.perf_counter() - started
    return flop * repeats / seconds / 1e9


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    print(f"{cpu_model()}; torch {torch.__version__}, {args.threads} thread{'s' if args.threads > 1 else ''}, "
          f"float32 conv2d 3x3")
    for label, *shape in SHAPES:
        print(f"  {label:<42} {gflops(*shape, args.repeats):6.1f} GFLOP/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
