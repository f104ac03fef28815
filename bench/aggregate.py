"""Benchmark: the server's aggregation Θ = Σ_i w_i θ_i (eq. 4) in GB/s against memcpy.

    python -m bench.aggregate [--parties 3 12] [--backbones ir18 ir50] [--repeats 20] [--threads 1]

Backbone sizes are the flat states of IResNet-18/50 at 112x112, embedding 512 (float32). Bandwidth is the
bytes of the P inputs (P·D·4) over the time; memcpy copies a P·D float32 buffer. Each variant runs on data
laid out as the server holds it after a gather:
  before      the earlier code path: `weighted_average` into a freshly zeroed buffer (P axpy passes),
              then the server's two full copies (`new[:n] = server_update(...)`, `theta.copy_(new)`)
  before+FV   the same, plus FV's per-round `torch.stack` of the θ_i into its [P, D] snapshot
  after       fedmpi.aggregation.party_rows.PartyRows: the gather's [P, D] rows kept across rounds,
              `weighted_sum(w, out)` by one matrix-vector product into a preallocated buffer
  after+Θ     the same, then Θ ← the mean (the one copy FedAvg/PFM's server update makes)
Best of --repeats (the machine is shared); prints figures, asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch


def backbone_numel(name: str) -> int:
    from fedmpi.models.iresnet import iresnet
    from fedmpi.core.state import BackboneState

    with torch.device("meta"):
        net = iresnet(name, embedding_size=512, input_size=112)
    return BackboneState(net).numel


def best_seconds(fn, repeats: int) -> float:
    fn()  # first touch of every page
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def weighted_average(thetas: list[torch.Tensor], w: torch.Tensor) -> torch.Tensor:
    """roles/exchange.weighted_average as it was earlier (the reference)."""
    out = torch.zeros_like(thetas[0])
    for theta, wi in zip(thetas, w.tolist()):
        out.add_(theta, alpha=wi)
    return out


def before_variant(slots: list[torch.Tensor], theta: torch.Tensor, n_trainable: int, w: torch.Tensor,
                   snapshot: torch.Tensor | None):
    thetas = slots[1:]

    def run():
        if snapshot is not None:
            torch.stack(thetas, out=snapshot)  # FederatedValidation.snapshot
        average = weighted_average(thetas, w)  # Server.aggregate
        new = average
        new[:n_trainable] = average[:n_trainable]  # PFM/FedAvg server_update returns the average
        theta.copy_(new)
    return run


def after_variant(rows, mean: torch.Tensor, theta: torch.Tensor | None, w: torch.Tensor):
    def run():
        rows.weighted_sum(w, mean)
        if theta is not None:
            theta.copy_(mean)
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parties", type=int, nargs="+", default=[3, 12])
    parser.add_argument("--backbones", nargs="+", default=["ir18", "ir50"])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the server rank runs with 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    try:
        from fedmpi.aggregation.party_rows import PartyRows
    except ImportError:
        PartyRows = None
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"aggregation, float32, {args.threads} thread(s), best of {args.repeats}, load {load}")
    if PartyRows is None:
        print("  (fedmpi.aggregation.party_rows is not on this branch yet: only the reference is timed)")
    for name in args.backbones:
        D = backbone_numel(name)
        for P in args.parties:
            g = torch.Generator().manual_seed(P)
            w = torch.rand(P, generator=g, dtype=torch.float64)
            w /= w.sum()
            nbytes = P * D * 4
            src, dst = torch.rand(P * D, generator=g), torch.empty(P * D)
            memcpy = best_seconds(lambda: dst.copy_(src), args.repeats)
            del src, dst
            slots = [torch.rand(D, generator=g) for _ in range(1 + P)]
            theta = torch.empty(D)
            n = int(0.99 * D)  # the trainable prefix; BN statistics after it
            variants = {"before": before_variant(slots, theta, n, w, None),
                        "before+FV": before_variant(slots, theta, n, w, torch.empty(P, D))}
            reference = weighted_average(slots[1:], w)
            if PartyRows is not None:
                rows = PartyRows(P, D, lead=1)
                rows.rows.copy_(torch.stack(slots[1:]))
                mean = torch.empty(D)
                variants["after"] = after_variant(rows, mean, None, w)
                variants["after+Θ"] = after_variant(rows, mean, theta, w)
            print(f"  {name} D={D / 1e6:.1f} M ({D * 4 / 2**20:.0f} MiB), P={P}: memcpy "
                  f"{nbytes / memcpy / 1e9:5.1f} GB/s ({memcpy * 1e3:.1f} ms)")
            for label, fn in variants.items():
                seconds = best_seconds(fn, args.repeats)
                check = ""
                if label == "after":
                    err = float((mean - reference).abs().max())
                    check = f"  max |after - before| {err:.1e}"
                print(f"    {label:<10} {nbytes / seconds / 1e9:5.1f} GB/s = {memcpy / seconds:4.2f} x memcpy "
                      f"({seconds * 1e3:6.1f} ms){check}")
            del slots, variants
    return 0


if __name__ == "__main__":
    sys.exit(main())
