"""Benchmark: re-splitting a party's classifier for another rank count (fedmpi/relayout), MS1M-size by default
(85,742 classes x 512, float32 class centres + their momentum). Prints figures, asserts nothing.

For each move A->B: the A parts are written as checkpoint parts (HDF5, as a run writes them); then timed
(best of --repeat): the re-split in memory (merge + split, `relayout.shards.reshard`), and the offline path of
`python -m tools.reshard` for one party (read the A parts, re-split, write the B parts, fsynced), with the
bytes moved. A resumed run's trainer rank reads all A parts and cuts its own block (the read column).

usage: python -m bench.reshard [--classes 85742] [--embedding 512] [--moves 8:4 4:3] [--repeat 3] [--dir DIR]
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import torch

from fedmpi.models.class_centres import shard_bounds
from fedmpi.relayout.party_state import read_party_parts
from fedmpi.relayout.shards import reshard
from fedmpi.store.manifest import party_part, write_part


def make_parts(classes: int, embedding: int, shards: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    parts = []
    for k in range(shards):
        start, end = shard_bounds(classes, shards, k)
        weight = torch.randn(end - start, embedding, generator=g)
        parts.append({"classifier": {"weight": weight},
                      "classifier_optimizer": {"state": {0: {"momentum_buffer": torch.randn_like(weight)}},
                                               "param_groups": [{"lr": 0.1, "momentum": 0.9, "params": [0]}]},
                      "precision": {}})
    return parts


def best(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reshard", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--classes", type=int, default=85742)
    parser.add_argument("--embedding", type=int, default=512)
    parser.add_argument("--moves", nargs="+", default=["8:4", "4:3"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the parts are written (default: a temporary folder)")
    args = parser.parse_args(argv)
    size = 2 * args.classes * args.embedding * 4
    print(f"classifier {args.classes} x {args.embedding} float32 + momentum: {size / 2**20:.0f} MiB; "
          f"torch threads {torch.get_num_threads()}")
    print(f"{'move':>6} {'in memory s':>12} {'read A parts s':>15} {'offline s':>10} {'offline MiB/s':>14}")
    base = Path(args.dir or tempfile.mkdtemp(prefix="bench-reshard-"))
    try:
        for move in args.moves:
            a, b = (int(x) for x in move.split(":"))
            parts = make_parts(args.classes, args.embedding, a)
            folder = base / f"from-{a}"
            folder.mkdir(parents=True, exist_ok=True)
            for k, tree in enumerate(parts):
                write_part(folder, party_part("ms1m", k), tree, {"round": 1, "step": 1}, k)
            memory = best(args.repeat, lambda parts=parts, b=b: reshard(parts, b, False, False))
            read = best(args.repeat, lambda folder=folder, a=a: read_party_parts(folder, "ms1m", a))
            out = base / f"to-{b}"

            def offline(out=out, folder=folder, a=a, b=b):
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir(parents=True)
                for k, tree in enumerate(reshard(read_party_parts(folder, "ms1m", a), b, False, False)):
                    tree.pop("_attrs", None)
                    write_part(out, party_part("ms1m", k), tree, {"round": 1, "step": 1}, k)

            whole = best(args.repeat, offline)
            print(f"{move:>6} {memory:>12.3f} {read:>15.3f} {whole:>10.3f} {2 * size / 2**20 / whole:>14.0f}")
            shutil.rmtree(folder)
            shutil.rmtree(out, ignore_errors=True)
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
