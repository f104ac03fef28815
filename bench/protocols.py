"""Figures for the large-scale protocols (a benchmark, not a test):

  1. images/s through the IJB path on CPU: decode + five-point alignment alone, and decode + align + flip-test
     embedding with the paper's IR-18 (112x112, 512-d) and with the CPU demo's backbone;
  2. pairs/s scoring IJB-C-sized template verification on random features (23,124 templates, 15,658,489 pairs
     of which 19,557 genuine), then TAR@FAR 1e-6..1e-1 and the ROC; and the peak resident memory of that step
     (measured in a fresh process so that nothing else counts).

python -m bench.protocols [--images 256] [--threads N] [--skip-embedding]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IJBC_TEMPLATES, IJBC_PAIRS, IJBC_GENUINE = 23_124, 15_658_489, 19_557


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def score_ijbc(dim: int = 512) -> dict:
    """Runs in its own process: random template features, IJB-C's pair count, scored and summarised."""
    import numpy as np
    import torch

    from fedmpi.metrics.roc import PAPER_FARS, roc_curve, tar_at_far
    from fedmpi.protocols.ijb import score_pairs

    rng = np.random.default_rng(0)
    imported = peak_rss_mib()
    features = torch.nn.functional.normalize(torch.from_numpy(
        rng.standard_normal((IJBC_TEMPLATES, dim), dtype=np.float32)), dim=1)
    first = rng.integers(IJBC_TEMPLATES, size=IJBC_PAIRS)
    second = rng.integers(IJBC_TEMPLATES, size=IJBC_PAIRS)
    same = np.zeros(IJBC_PAIRS, bool)
    same[:IJBC_GENUINE] = True                      # which pairs are genuine does not change the cost
    before = peak_rss_mib()
    start = time.perf_counter()
    scores = score_pairs(features, first, second)
    scored = time.perf_counter() - start
    after_scoring = peak_rss_mib()
    start = time.perf_counter()
    tar_at_far(scores, same, PAPER_FARS)
    roc_curve(scores, same)
    summarised = time.perf_counter() - start
    return {"imported_mib": imported, "inputs_mib": before, "peak_scoring_mib": after_scoring,
            "peak_mib": peak_rss_mib(),
            "pairs_per_s": IJBC_PAIRS / scored, "score_s": scored, "tar_roc_s": summarised}


def embedding_rates(images: int, threads: int) -> list[tuple[str, float]]:
    import torch

    from fedmpi.models.iresnet import iresnet
    from fedmpi.protocols.faces import FaceImages, embed_faces
    from fedmpi.protocols.fixtures import write_ijb
    from fedmpi.protocols.ijb_meta import read_ijb_meta

    torch.set_num_threads(threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = write_ijb(Path(tmp) / "IJBC", "ijbc", size=112, subjects=max(8, images // 12), negatives=10)
        meta = read_ijb_meta(root, "ijbc")
        n = min(images, len(meta.names))
        for size, name, width, dim in ((112, "ir18", 1.0, 512), (32, "ir18", 0.25, 128)):
            faces = FaceImages(root / "loose_crop", meta.names[:n], size, meta.landmarks[:n])
            start = time.perf_counter()
            for _ in faces.batches(64):
                pass
            rows.append((f"decode + align to {size}x{size}", n / (time.perf_counter() - start)))
            backbone = iresnet(name, dim, size, width).eval()
            start = time.perf_counter()
            embed_faces(backbone, faces, batch_size=64)
            rows.append((f"decode + align + embed (flip test), {name} width {width:g} {size}px {dim}-d",
                         n / (time.perf_counter() - start)))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.protocols", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-embedding", action="store_true")
    parser.add_argument("--score-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.score_only:
        print(json.dumps(score_ijbc()))
        return 0
    if not args.skip_embedding:
        for label, rate in embedding_rates(args.images, args.threads):
            print(f"{label:<70} {rate:8.1f} images/s")
    out = subprocess.run([sys.executable, "-m", "bench.protocols", "--score-only"], capture_output=True,
                         text=True, check=True)
    r = json.loads(out.stdout)
    print(f"IJB-C-sized scoring: {IJBC_TEMPLATES} templates x 512-d, {IJBC_PAIRS} pairs: "
          f"{r['pairs_per_s'] / 1e6:.2f} M pairs/s ({r['score_s']:.1f} s), TAR@FAR + ROC {r['tar_roc_s']:.1f} s")
    print(f"peak resident memory: {r['imported_mib']:.0f} MiB after imports, "
          f"{r['inputs_mib']:.0f} MiB with features and pair lists, "
          f"{r['peak_scoring_mib']:.0f} MiB after scoring, {r['peak_mib']:.0f} MiB after TAR@FAR and ROC")
    return 0


if __name__ == "__main__":
    sys.exit(main())
