"""The CPU input path of a trainer rank, per core: a synthetic faces_emore RecordIO of 112x112 JPEGs on local
disk (written once under --data-root), read through the real dataset (fedmpi/data/face_dataset.py), in one
process on one core, stage by stage:

  read            the record's bytes (RecordIO + its label checks): what a worker does with data.decoder=gpu
  read + decode   + Pillow's JPEG decode (libjpeg-turbo)
  CPU path        + flip and normalise to float32: what a DataLoader worker does with data.decoder=cpu
  DataLoader      the same through torch's DataLoader with W workers (batches of --batch, collated), the
                  workers' scaling (images/s of wall time, so per worker when the cores are there)

then the cores a rank needs to feed a step of R images/s: R / (the CPU path's images/s per core), at the GPU
step rates given (--step-rates: today's IR-50 trainer on an H200, and the 1.5x goal).

    python -m bench.decode [--images 4000] [--batch 128] [--workers 1 2] [--step-rates 1891 2800]
"""
from __future__ import annotations

import argparse
import os
import platform
import time
import types
from pathlib import Path


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def open_set(root: Path, images: int, image_size: int):
    from fedmpi.data import open_training_set

    per_identity = 20
    spec = types.SimpleNamespace(kind="synthetic", path="", style="ms1m", identities=max(1, images // per_identity),
                                 images_per_identity=per_identity, split_index=0, split_count=1)
    cfg = types.SimpleNamespace(root=str(root), image_size=image_size, workers=0, seed=0, skip_bad=False,
                                val_sets=[], val_kind="synthetic", val_path="", val_pairs_per_fold=2)
    return open_training_set(spec, cfg)


def per_second(work, n: int) -> float:
    t = time.perf_counter()
    for i in range(n):
        work(i)
    return n / (time.perf_counter() - t)


def loader_rate(dataset, batch: int, workers: int, batches: int) -> float:
    import torch

    from fedmpi.data import ShardBatchSampler

    sampler = ShardBatchSampler(len(dataset), 0, 1, batch, seed=0)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler, num_workers=workers,
                                         persistent_workers=workers > 0,
                                         multiprocessing_context="fork" if workers else None)
    it = iter(loader)
    for _ in range(2 * max(workers, 1)):    # the workers started and their prefetch filled
        next(it)
    t = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches * batch / (time.perf_counter() - t)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=4000)
    parser.add_argument("--image-size", type=int, default=112)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batches", type=int, default=20, help="timed DataLoader batches per worker count")
    parser.add_argument("--step-rates", type=float, nargs="+", default=[1891.0, 2800.0])
    parser.add_argument("--data-root", type=Path, default=Path("data"))
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    t = time.perf_counter()
    dataset = open_set(args.data_root, args.images, args.image_size)
    n = len(dataset)
    print(f"{n} synthetic {args.image_size}x{args.image_size} JPEGs in {dataset.describe()['path']} "
          f"({time.perf_counter() - t:.0f} s to open or write); {cpu_model()}, {os.cpu_count()} cores", flush=True)
    mean_bytes = sum(len(dataset.read(i).data) for i in range(n)) / n
    print(f"{mean_bytes / 1024:.1f} KiB a JPEG (MS1M's faces_emore: about 7 KiB at quality 95; a larger file decodes "
          f"slower)", flush=True)
    stages = {"read": per_second(dataset.read, n),
              "read + decode": per_second(dataset.load, n),
              "CPU path (read, decode, flip, normalise)": per_second(lambda i: dataset[(i, i % 2 == 0)], n)}
    width = max(len(name) for name in stages)
    print("one process, one core:", flush=True)
    for name, rate in stages.items():
        print(f"  {name:<{width}}  {rate:8.0f} img/s  {1e6 / rate:7.1f} us/img", flush=True)
    print(f"DataLoader, batches of {args.batch} (images/s of wall time):", flush=True)
    workers_rate = None
    for w in args.workers:
        rate = loader_rate(dataset, args.batch, w, args.batches)
        workers_rate = workers_rate or rate / w
        print(f"  {w} worker{'s' if w > 1 else ''}: {rate:8.0f} img/s", flush=True)
    cpu_path = stages["CPU path (read, decode, flip, normalise)"]
    for r in args.step_rates:
        print(f"a step of {r:.0f} img/s needs {r / cpu_path:.2f} cores decoding on the CPU (data.decoder=cpu; "
              f"{r / workers_rate:.2f} DataLoader workers at the 1-worker rate), {r / stages['read']:.3f} reading "
              f"for the GPU's decoder (data.decoder=gpu)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
