"""Benchmark, not a test. Two figures:

1. Throughput (images/s) of one trainer rank's virtual clients (fedmpi.crossdevice.local_training.LocalTrainer,
   what a trainer rank runs each round) against a plain single-process PyTorch loop training the same clients
   with the same model, the same batches in the same order, SGD with weight decay 0.004 and the same
   sum_k n_k theta_k accumulation (goal: >= 0.9x), and the same trainer with the round's clients trained as one
   batch (clients.cohort=vectorised, fedmpi/crossdevice/cohort.py). One thread on the CPU (--device cuda: a GPU).
2. Round time and bytes per round at M = 100 clients of 500 images (the paper's population; --images shrinks the
   clients, the bytes do not depend on it) for C = 0.1 and 0.4 on 1, 2 and 4 trainer ranks:
   `python -m fedmpi.run --config configs/hsu_cifar10.yaml` under mpirun, read
   from the run logs (mean round time over the rounds after the first); run.deterministic=true, and the final
   global models of the different rank counts are compared (max |difference|, bitwise equality).

    python -m bench.clients [--clients 10] [--repeats 3] [--rounds 3] [--images 500] [--ranks 1 2 4]
                                  [--fractions 0.1 0.4] [--out /tmp/bench_clients] [--skip-rounds] [--device cpu]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from jobs.mpirun import mpirun

from fedmpi.config import load_config
from fedmpi.core.build import build_parts
from fedmpi.crossdevice.client_data import open_client_data, to_tensor
from fedmpi.crossdevice.local_training import LocalTrainer, client_seed
from fedmpi.models.backbone import build_client_model
from fedmpi.store.h5log import LogReader

CONFIG = "configs/hsu_cifar10.yaml"


def plain_loop(model, data, clients, theta, lr, wd, batch, seed, r) -> None:
    """What one would write by hand: load the global weights, torch.optim.SGD, the same batch order."""
    params = list(model.parameters())
    device = params[0].device
    total = [torch.zeros_like(p, dtype=torch.float64) for p in params]
    for k in clients:
        torch.nn.utils.vector_to_parameters(theta, params)
        opt = torch.optim.SGD(params, lr=lr, weight_decay=wd)
        generator = torch.Generator().manual_seed(client_seed(seed, r, k))
        index = data.parts[k]
        order = index[torch.randperm(len(index), generator=generator).numpy()]
        for s in range(0, len(order), batch):
            b = order[s:s + batch]
            x = to_tensor(data.train.images[b], data.mean, data.std, torch.float32).to(device)
            loss = F.cross_entropy(model(x), torch.from_numpy(data.train.labels[b]).to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        for t, p in zip(total, params):
            t.add_(p.detach().to(torch.float64), alpha=len(index))


def throughput(out: Path, n_clients: int, repeats: int, device: str = "cpu") -> None:
    torch.set_num_threads(1)
    cfg = load_config(CONFIG, [f"data.root={out / 'data'}", "clients.epochs=1"])
    data = open_client_data(cfg)
    where = torch.device(device)
    parts = build_parts(cfg, where, torch.float32)
    model, state = parts.model, parts.state
    theta = state.read().clone()
    trainers = {cohort: LocalTrainer(model, state, parts.rule, data, epochs=1, batch_size=cfg.optim.batch_size,
                                     seed=cfg.run.seed, augment=False, device=where, dtype=torch.float32,
                                     vectorised=cohort) for cohort in (False, True)}
    clients = list(range(n_clients))
    images = sum(len(data.parts[k]) for k in clients)

    def finished(result):   # a GPU's kernels run asynchronously: a loop's time ends when its work does
        if where.type == "cuda":
            torch.cuda.synchronize()
        return result

    loops = {"fedmpi LocalTrainer": lambda rep: finished(trainers[False].train_round(theta, clients, rep, cfg.optim.lr)),
             "plain PyTorch loop": lambda rep: finished(plain_loop(model, data, clients, theta, cfg.optim.lr,
                                                                   cfg.optim.weight_decay, cfg.optim.batch_size,
                                                                   cfg.run.seed, rep)),
             "fedmpi vectorised": lambda rep: finished(trainers[True].train_round(theta, clients, rep, cfg.optim.lr))}
    timings = {name: [] for name in loops}
    cpu = {name: [] for name in loops}     # this process's CPU time: what other processes' load leaves out
    for rep in range(repeats):   # interleaved, in alternating order, so that load from others hits both alike
        for name in (list(loops) if rep % 2 == 0 else list(loops)[::-1]):
            t, c = time.perf_counter(), time.process_time()
            loops[name](rep)
            timings[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
    print(f"1. one trainer rank, {n_clients} clients x {images // n_clients} images, E=1, B={cfg.optim.batch_size}, "
          f"{device}, 1 thread, {repeats} interleaved repeats:")
    for name, ts in timings.items():
        print(f"   {name:<22} best {images / min(ts):8.1f} images/s, median {images / np.median(ts):8.1f}; "
              f"per CPU second: best {images / min(cpu[name]):8.1f}, median {images / np.median(cpu[name]):8.1f}")
    pairs = [plain / ours for ours, plain in zip(timings["fedmpi LocalTrainer"], timings["plain PyTorch loop"])]
    best = min(timings["plain PyTorch loop"]) / min(timings["fedmpi LocalTrainer"])
    listed = ", ".join(f"{p:.3f}" for p in pairs)
    print(f"   ratio fedmpi / plain   best-of {best:.3f}, median of the repeats' ratios {np.median(pairs):.3f} "
          f"({listed})")
    cpu_pairs = [plain / ours for ours, plain in zip(cpu["fedmpi LocalTrainer"], cpu["plain PyTorch loop"])]
    print(f"   ratio per CPU second   median {np.median(cpu_pairs):.3f} ({', '.join(f'{p:.3f}' for p in cpu_pairs)})")
    cohort = [loop / vec for loop, vec in zip(timings["fedmpi LocalTrainer"], timings["fedmpi vectorised"])]
    print(f"   vectorised cohort / client by client: speed-up best-of "
          f"{min(timings['fedmpi LocalTrainer']) / min(timings['fedmpi vectorised']):.3f}, median of the repeats' "
          f"{np.median(cohort):.3f} ({', '.join(f'{p:.3f}' for p in cohort)})")


def rounds_table(out: Path, ranks: list[int], fractions: list[float], rounds: int, images: int) -> None:
    print(f"2. M=100 clients x {images} images, E=1, B=64, {rounds} rounds (mean round time of rounds 2..), CPU/gloo:")
    print(f"   {'C':>4}  {'trainer ranks':>13}  {'round time s':>12}  {'MB per round':>12}  {'up MB':>8}")
    for C in fractions:
        finals = {}
        for R in ranks:
            name = f"C{C:g}-R{R}"
            args = ["-m", "fedmpi.run", "--config", CONFIG, f"clients.fraction={C}", f"clients.ranks={R}",
                    f"clients.rounds={rounds}", f"clients.images={images}", "eval.every=0", "clients.eval_images=500",
                    "run.device=cpu",
                    "run.deterministic=true", f"run.save_final={out / name}.pt", f"data.root={out / 'data'}",
                    f"log.dir={out}", f"log.name={name}"]
            (out / name / "log.h5").unlink(missing_ok=True)
            proc = mpirun(R + 1, args, timeout=3600)
            if proc.returncode:
                raise SystemExit(f"{name} failed:\n{proc.stderr[-2000:]}")
            with LogReader(out / name / "log.h5") as log:
                t = log.table("rounds")
            steady = t["round_time"][1:] if rounds > 1 else t["round_time"]
            up = R * 8 * (sum(p.numel() for p in build_client_model(load_config(CONFIG), "cpu",
                                                                     torch.float32).parameters()) + 1)
            print(f"   {C:>4g}  {R:>13d}  {np.mean(steady):12.2f}  {t['bytes_moved'][-1] / 1e6:12.2f}  "
                  f"{up / 1e6:8.2f}", flush=True)
            finals[R] = torch.load(out / f"{name}.pt")["theta"]
        first = finals[ranks[0]]
        same = {R: (bool(torch.equal(first, theta)), float((first - theta).abs().max())) for R, theta in finals.items()}
        verdicts = [f"{R} ranks {'bitwise equal' if eq else f'max |diff| {d:.3g}'}" for R, (eq, d) in same.items()]
        print(f"   C={C:g}: global model after {rounds} rounds vs {ranks[0]} rank(s): " + ", ".join(verdicts))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--images", type=int, default=500, help="images per client in the round-time table")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.1, 0.4])
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench_clients"))
    parser.add_argument("--skip-rounds", action="store_true", help="only the throughput comparison")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where part 1 trains")
    args = parser.parse_args()
    throughput(args.out, args.clients, args.repeats, args.device)
    if not args.skip_rounds:
        rounds_table(args.out, args.ranks, args.fractions, args.rounds, args.images)
    return 0


if __name__ == "__main__":
    sys.exit(main())
