"""Benchmark: sharded vs replicated margin classifier inside one party (CPU, gloo). Prints figures, asserts nothing.

For each rank count it launches `mpirun -n R python bench/classifier.py --worker ...`; every worker
builds the classifier for each class count and mode, runs a few timed steps (forward + backward + sync_grads,
then an SGD momentum step) on random embeddings (batch per rank, 512-d) and reports, per rank, the step time
(max over ranks) and the classifier memory (parameter + momentum bytes).

usage: python bench/classifier.py [--ranks 1 2 4] [--classes 10000 100000] [--steps 3] [--batch 64]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(classes: list[int], steps: int, batch: int, embedding: int) -> int:
    import torch
    import torch.distributed as dist

    from fedmpi import comm
    from fedmpi.models import build_classifier

    comm.init_torch_distributed("gloo")
    ranks, rank = dist.get_world_size(), dist.get_rank()
    party = comm.new_group(range(ranks))
    modes = ("sharded", "replicated") if ranks > 1 else ("plain",)
    for num_classes in classes:
        for mode in modes:
            classifier = build_classifier(num_classes, embedding, kind="arcface", group=party,
                                          mode="replicated" if mode == "plain" else mode, seed=0)
            optimizer = torch.optim.SGD(classifier.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
            g = torch.Generator().manual_seed(rank)
            timings = []
            for step in range(steps + 1):  # step 0 warms up (allocations, momentum buffers)
                embeddings = torch.randn(batch, embedding, generator=g, requires_grad=True)
                labels = torch.randint(0, num_classes, (batch,), generator=g)
                dist.barrier(group=party)
                start = time.perf_counter()
                optimizer.zero_grad(set_to_none=True)
                classifier(embeddings, labels).backward()
                classifier.sync_grads()
                middle = time.perf_counter()
                optimizer.step()
                end = time.perf_counter()
                if step:
                    timings.append((middle - start, end - start))
            mean = torch.tensor(timings, dtype=torch.float64).mean(0)
            dist.all_reduce(mean, op=dist.ReduceOp.MAX, group=party)
            weight = classifier.weight
            momentum = optimizer.state[weight]["momentum_buffer"]
            memory = weight.numel() * weight.element_size() + momentum.numel() * momentum.element_size()
            if rank == 0:
                print("RESULT " + json.dumps({
                    "ranks": ranks, "classes": num_classes, "mode": mode, "rows": weight.shape[0],
                    "fwd_bwd_s": mean[0].item(), "step_s": mean[1].item(), "memory_mb": memory / 2**20}),
                    flush=True)
            del classifier, optimizer, weight, momentum
    comm.shutdown()
    return 0


def launch(ranks: int, argv: list[str]) -> list[dict]:
    mpirun = Path(sys.executable).parent / "mpirun"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [str(mpirun) if mpirun.exists() else (shutil.which("mpirun") or "mpirun"), "--oversubscribe",
           "--bind-to", "none", "-n", str(ranks), sys.executable, __file__, "--worker", *argv]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if result.returncode:
        raise SystemExit(f"benchmark on {ranks} ranks failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return [json.loads(line[len("RESULT "):]) for line in result.stdout.splitlines() if line.startswith("RESULT ")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--classes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--embedding", type=int, default=512)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        from fedmpi import comm

        return comm.run_guarded("bench", lambda: worker(args.classes, args.steps, args.batch, args.embedding))
    argv = ["--classes", *map(str, args.classes), "--steps", str(args.steps), "--batch", str(args.batch),
            "--embedding", str(args.embedding)]
    print(f"classifier step (arcface, {args.embedding}-d, batch {args.batch}/rank, float32, gloo, "
          f"OMP_NUM_THREADS=1, {os.cpu_count()} cores; mean of {args.steps} steps, slowest rank)")
    print(f"{'ranks':>5} {'classes':>8} {'mode':>10} {'rows/rank':>9} {'fwd+bwd+sync ms':>16} "
          f"{'+sgd ms':>9} {'param+mom MB/rank':>18}")
    for ranks in args.ranks:
        for r in launch(ranks, argv):
            print(f"{r['ranks']:>5} {r['classes']:>8} {r['mode']:>10} {r['rows']:>9} "
                  f"{1e3 * r['fwd_bwd_s']:>16.1f} {1e3 * r['step_s']:>9.1f} {r['memory_mb']:>18.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
