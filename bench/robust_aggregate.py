"""Benchmark: the server's aggregation time per round for P uploads of IResNet-18 size (D = 24.0 M
float32 values, the flat state at 112x112, embedding 512) with each rule of fedmpi/aggregation/registry.py and
with DP-FedAvg's Gaussian mechanism, against today's weighted mean (the one mat-vec); and what the server's upload
check adds to every round before any of them (each upload's update norm, nothing out of range).

    python -m bench.robust_aggregate [--parties 3 12 100] [--repeats 3] [--threads 1] [--max-gib 6]

Where P x D x 4 bytes would pass --max-gib, the rules run on the first D' columns that fit and the time is
scaled by D/D' (every rule here is linear in D: column sorts, a Gram matrix accumulated over column blocks),
marked `scaled`. f is the largest each rule's requirement allows (Krum n > 2f + 2, Bulyan n >= 4f + 3),
trimmed mean beta = 0.1. Best of --repeats (the machine is shared); prints figures, asserts nothing.
"""
from __future__ import annotations

import argparse
import io
import os
from types import SimpleNamespace

import torch

from bench.aggregate import backbone_numel, best_seconds
from fedmpi.aggregation.bulyan import Bulyan, BulyanOptions
from fedmpi.aggregation.aggregators import WeightedMean
from fedmpi.aggregation.dp import GaussianMechanism
from fedmpi.aggregation.krum import Krum, KrumOptions, MultiKrum, MultiKrumOptions
from fedmpi.aggregation.median import Median
from fedmpi.aggregation.party_rows import PartyRows
from fedmpi.aggregation.trimmed_mean import TrimmedMean, TrimmedMeanOptions
from fedmpi.aggregation.upload_check import UploadCheck
from fedmpi.config.aggregation import DPConfig


def rules(P: int, reference: torch.Tensor) -> dict:
    krum_f, bulyan_f = max((P - 3) // 2, 0), max((P - 3) // 4, 0)
    return {"median": Median(), "trimmed_mean (beta 0.1)": TrimmedMean(TrimmedMeanOptions(0.1)),
            f"krum (f {krum_f})": Krum(KrumOptions(krum_f)), f"multikrum (f {krum_f})": MultiKrum(MultiKrumOptions(krum_f)),
            f"bulyan (f {bulyan_f})": Bulyan(BulyanOptions(bulyan_f)),
            "dp mean (fixed clip)": dp_mean(P, reference)}


def dp_mean(P: int, reference: torch.Tensor) -> GaussianMechanism:
    """DP-FedAvg around the mean, as the server builds it (core/build.py), measuring updates from `reference`."""
    mechanism = GaussianMechanism(WeightedMean(), DPConfig(enabled=True), P)
    mechanism.starts_from(reference)
    return mechanism


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parties", type=int, nargs="+", default=[3, 12, 100])
    parser.add_argument("--backbone", default="ir18")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the server rank runs with 1)")
    parser.add_argument("--max-gib", type=float, default=6.0, help="largest [P, D] upload buffer to allocate")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    D = backbone_numel(args.backbone)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"aggregation of P uploads of {args.backbone} (D = {D / 1e6:.1f} M float32), {args.threads} thread(s), "
          f"best of {args.repeats}, load {load}")
    print(f"{'P':>4}  {'rule':<26} {'seconds':>9}  {'x mean':>7}")
    for P in args.parties:
        columns = min(D, int(args.max_gib * 2**30 / (4 * P)))
        scale = D / columns
        g = torch.Generator().manual_seed(P)
        party_rows = PartyRows(P, columns)
        party_rows.rows.copy_(torch.rand(P, columns, generator=g))
        uploads = SimpleNamespace(rows=party_rows.rows, weighted_mean=party_rows.weighted_sum, gives_uploads=True,
                                  upload_names=[f"p{i}" for i in range(P)])
        w = torch.full((P,), 1.0 / P, dtype=torch.float64)
        out, reference = torch.empty(columns), torch.rand(columns, generator=g)
        mean = best_seconds(lambda: party_rows.weighted_sum(w, out), args.repeats) * scale
        note = f"  scaled from {columns / 1e6:.1f} M columns" if scale > 1 else ""
        print(f"{P:>4}  {'mean (today)':<26} {mean:9.3f}  {1.0:7.1f}{note}")
        check = UploadCheck("exclude", 10.0, reference, stream=io.StringIO())
        seconds = best_seconds(lambda: check(uploads, w), args.repeats) * scale
        print(f"{P:>4}  {'+ upload check (norms)':<26} {seconds:9.3f}  {seconds / mean:7.1f}{note}", flush=True)
        for name, rule in rules(P, reference).items():
            seconds = best_seconds(lambda: rule(uploads, w, out), args.repeats) * scale
            print(f"{P:>4}  {name:<26} {seconds:9.3f}  {seconds / mean:7.1f}{note}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
