"""Benchmark: secure aggregation's cost per round (fedmpi/secagg) at the paper's layouts and a Hsu cohort.

    python -m bench.secagg [--layouts ir50x3 ir50x12 hsu100] [--repeats 3] [--round-seconds S] [--threads N]

Layouts: ir50x3 / ir50x12, 3 or 12 parties uploading IR-50's flat state (112 px, d 512; SecAgg, every party
masks with every other, t = floor(P/2) + 1); hsu100, 100 virtual clients of the CIFAR CNN (SecAgg+, k = 12,
t = 6: Google's FCP finder for 5 % corrupt, 5 % dropped, docs/BASELINES.md). Every key is fresh each round, so
"keys" (R0 + R1: two X25519 pairs, Shamir shares, sealed boxes, for every participant, and the server's
routing) is a per-round cost. Per participant (on its own rank in a run): encoding (clip + fixed point +
stochastic rounding) and masking (the boxes opened, its self mask and one mask per neighbour); the server:
summing the masked vectors and unmasking (reconstructions and removing every self mask). Bytes up: what one
participant sends in a round (keys, boxes, commitment, masked vector, unmask shares) over the plain float32
upload. Masking, summing and unmasking run on --threads threads (default: every core the process may use;
fedmpi/secagg/cores.py). Best of --repeats (the machine is shared); prints figures, asserts only that the sum
is exact.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from bench.aggregate import backbone_numel
from fedmpi.secagg import cores, shares
from fedmpi.secagg.encoding import Encoding
from fedmpi.secagg.participant import Participant
from fedmpi.secagg.server import Session


def cifar_numel() -> int:
    from fedmpi.models.cifar_cnn import CifarCNN
    return sum(p.numel() for p in CifarCNN().state_dict().values())


def layouts() -> dict[str, tuple[int, int, int | None, int]]:
    """name -> (participants, entries, SecAgg+ degree or None, threshold)."""
    ir50 = backbone_numel("ir50")
    return {"ir50x3": (3, ir50, None, 2), "ir50x12": (12, ir50, None, 7), "hsu100": (100, cifar_numel(), 12, 6)}


class Clock(dict):
    def add(self, name: str, since: float) -> float:
        now = time.perf_counter()
        self[name] = self.get(name, 0.0) + now - since
        return now


def one_round(n: int, m: int, degree: int | None, threshold: int, seed: int) -> tuple[Clock, int]:
    """A round of n participants; each input is made, encoded, masked and summed in turn (one at a time in
    memory). Returns the clock (per-participant figures summed over all of them) and one participant's bytes up."""
    enc, clock = Encoding(8.0, 22, n), Clock()
    rng = np.random.default_rng(seed)
    t = time.perf_counter()
    session = Session(0, list(range(1, n + 1)), threshold, enc.bits, m + 1, degree)
    people = {u: Participant(u, enc.bits) for u in range(1, n + 1)}
    advertised = {u: p.advertise() for u, p in people.items()}
    sid, peers = session.receive_keys(advertised)
    sent = {u: p.share_keys(sid, threshold, peers[u]) for u, p in people.items()}
    routed = session.route_shares(sent)
    t = clock.add("keys", t)
    plain = np.zeros(m + 1, dtype=np.uint64) if m < 10_000_000 else None
    for u, p in people.items():
        x = (rng.standard_normal(m, dtype=np.float32) * 0.01)
        t = time.perf_counter()
        words = enc.encode(x, 1.0, rng)
        t = clock.add("encode", t)
        if plain is not None:
            plain += words
        y = p.masked_input(routed[u], words, in_place=True)
        t = clock.add("mask", t)
        session.receive_masked(u, y)
        t = clock.add("server sum", t)
    survivors, dropped = session.close_masked()
    answers = {u: people[u].unmask(survivors, dropped) for u in survivors}
    t = time.perf_counter()
    total = session.unmask(answers)
    t = clock.add("server unmask", t)
    if plain is not None:
        assert (total == plain % enc.modulus).all(), "the unmasked sum differs from the plain sum"
    up = 64 + sum(len(b) for b in sent[1][0].values()) + 32 + total.nbytes + len(answers[1]) * shares.SHARE_BYTES
    return clock, up


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layouts", nargs="+", default=list(layouts()))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--round-seconds", type=float, default=None,
                    help="a silo round's time to print the fraction against (participant + server)")
    ap.add_argument("--threads", type=int, default=cores.threads(),
                    help="threads for masking, summing and unmasking (default: the cores this process may use)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cores.set_threads(args.threads)
    print(f"threads: {args.threads}")
    table = layouts()
    print("layout   | n   | entries    | keys (s) | encode / participant | mask / participant | server sum + unmask "
          "| bytes up / plain")
    for name in args.layouts:
        n, m, degree, threshold = table[name]
        runs = [one_round(n, m, degree, threshold, seed) for seed in range(args.repeats)]
        best = {k: min(c[k] for c, _ in runs) for k in runs[0][0]}
        up = runs[0][1]
        server = best["server sum"] + best["server unmask"]
        print(f"{name:8} | {n:3} | {m:10,} | {best['keys']:8.3f} | {best['encode'] / n:20.3f} | "
              f"{best['mask'] / n:18.3f} | {server:8.3f} ({best['server sum']:.3f} + {best['server unmask']:.3f}) "
              f"| {up:,} / {4 * m:,} = {up / (4 * m):.4f}")
        if args.round_seconds:
            added = best["keys"] + (best["encode"] + best["mask"]) / n + server
            share = 100 * added / args.round_seconds
            print(f"         a round adds {added:.2f} s: {share:.1f} % of {args.round_seconds} s")


if __name__ == "__main__":
    main()
