"""Benchmark, not a test: the server's share of a face-client round against the population M at a fixed cohort
(crossdevice/client_state.py, crossdevice/class_rows.py): storing the cohort's returned states (w_c checked and
written into W [M, d]), the method's class step on the rows seen so far, and the collapse measure. Every client
has been seen (the steady state of a long run). Prints, per M, the mean seconds of each part over --repeats rounds
after a first one (whose collapse measure sums over all of W once; later rounds update that sum) and the store's
bytes; positive-only FedAvg's parts are O(cohort d), FedAwS's spreadout O(M² d) with
every row (fed.options.rows=all; top_k: the same cosines, then each row's k nearest) and O(cohort M d) with the
round's rows as anchors (rows=round, the default).

    python -m bench.device_rows [--population 1000 10000 85742] [--cohort 100] [--d 128] [--repeats 3]
                                [--top-k 0] [--all-rows-max 10000]
"""
from __future__ import annotations

import argparse
import time

import torch

from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.algorithms.fedaws import FedAwS, FedAwSOptions
from fedmpi.crossdevice.class_rows import DeviceKit
from fedmpi.crossdevice.client_state import client_store


def one_round(store, exchange, cohort: int, d: int, r: int, generator) -> dict[str, float]:
    clients = torch.randperm(len(store.rows), generator=generator)[:cohort].tolist()
    returned = [(k, torch.nn.functional.normalize(torch.randn(d, generator=generator), dim=0)) for k in clients]
    t0 = time.perf_counter()
    store.put_round(r, returned)
    t1 = time.perf_counter()
    exchange.step(r, 0.01, {})
    return {"store": t1 - t0, "class step + cosine": time.perf_counter() - t1}


def measure(M: int, method, cohort: int, d: int, repeats: int) -> dict[str, float]:
    store = client_store(FedAvg(), [torch.zeros(1)], population=M, rows=d)
    store.rows.copy_(torch.nn.functional.normalize(torch.randn(M, d), dim=1))
    store.seen.fill_(True)
    exchange = method.classes.server_side(DeviceKit(store, d))
    generator = torch.Generator().manual_seed(0)
    one_round(store, exchange, cohort, d, 0, generator)    # a start's first round sums ŵ over all of W once
    times = [one_round(store, exchange, cohort, d, r, generator) for r in range(1, repeats + 1)]
    return {key: sum(t[key] for t in times) / repeats for key in times[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--population", type=int, nargs="+", default=[1000, 10000, 85742])
    parser.add_argument("--cohort", type=int, default=100)
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--all-rows-max", type=int, default=10000,
                        help="time FedAwS with every row (O(M² d)) up to this M only")
    args = parser.parse_args()
    torch.manual_seed(0)
    methods = {"positive-only fedavg": FedAvg(),
               "fedaws rows=round": FedAwS(FedAwSOptions(top_k=args.top_k, rows="round")),
               "fedaws rows=all": FedAwS(FedAwSOptions(top_k=args.top_k, rows="all"))}
    print(f"cohort {args.cohort}, d {args.d}, top_k {args.top_k}, {torch.get_num_threads()} threads; seconds per "
          f"round (mean of {args.repeats})")
    for M in args.population:
        for name, method in methods.items():
            if name.endswith("all") and M > args.all_rows_max:
                continue
            t = measure(M, method, args.cohort, args.d, args.repeats)
            print(f"M {M:>6}  {name:<20}  store {t['store']:.4f} s  class step + cosine "
                  f"{t['class step + cosine']:.3f} s  W {M * args.d * 4 / 1024 ** 2:.1f} MB", flush=True)


if __name__ == "__main__":
    main()
