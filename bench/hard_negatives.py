"""Benchmark: FedFR's hard-negative pass on one party rank (fedmpi/algorithms/fedfr/hard_negatives.py), what it
costs per round: one no-grad, eval-mode forward over the party's and the public images and the best cosine of
each public image. Prints figures, asserts nothing.

Measured here: the pass itself on synthetic sets written in the real formats (RecordIO, read and decoded by the
real readers) at a CPU scale (--local, --public images), its seconds and the rise of the process's peak resident
memory over it (/proc/self/status VmHWM, reset through /proc/self/clear_refs); then the forward alone on the
backbone of FedFR's scale (--paper-backbone at 112 px, one batch, seconds per image). Projected from them: the pass
at FedFR's scale, 4,000 identities in 40 parties (100 identities x ~65 training images = 6,500 images a party) and
6,000 public identities (x --public-per-identity images; MS1M-ArcFace averages 68 an identity): seconds per party
rank and round, and what the pass holds (L: local images x d, one value per public image, one batch).

    python -m bench.hard_negatives [--local 600] [--public 2000] [--batch 128] [--threads 1]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

FEDFR_LOCAL, FEDFR_PUBLIC_IDS, D_PAPER = 6500, 6000, 512


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class OneRank:
    """The PartyTraining fields the pass reads, for a party of one rank."""

    def __init__(self, batch, device, dtype):
        from fedmpi.silo.party_comm import PartyCollectives

        self.collectives, self.eval_batch = PartyCollectives(None, 0, 1, 0), batch
        self.prepare_images, self.device, self.dtype = (lambda x: x), device, dtype


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m bench.hard_negatives", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local", type=int, default=600, help="the party's images (x 20 per identity)")
    parser.add_argument("--public", type=int, default=2000, help="public images (x 10 per identity)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--backbone", default="ir18")
    parser.add_argument("--width", type=float, default=0.25)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--embedding", type=int, default=128)
    parser.add_argument("--paper-backbone", default="ir50", help="FedFR used SphereFace-64; IR-50 is near it in cost")
    parser.add_argument("--public-per-identity", type=float, default=68.0)
    parser.add_argument("--data", default=None, help="data.root for the synthetic sets (default: a temporary folder)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    import torch

    from bench.conv_gflops import cpu_model
    from fedmpi.algorithms.fedfr.hard_negatives import hard_negative_pass
    from fedmpi.config import load_config
    from fedmpi.data import open_training_set, prepare_training_set
    from fedmpi.models.backbone import build_backbone

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    root = args.data or tempfile.mkdtemp(prefix="bench-hn-")
    cfg = load_config(None, [f"data.root={root}", f"data.image_size={args.image_size}", "fed.algorithm=fedfr",
                             f"model.backbone={args.backbone}", f"model.width={args.width}",
                             f"model.embedding_size={args.embedding}",
                             f"parties=[{{name: a, data: {{identities: {args.local // 20}, images_per_identity: 20}}}}]",
                             "data.public.kind=synthetic", f"data.public.identities={args.public // 10}",
                             "data.public.images_per_identity=10"])
    local_spec, public_spec = cfg.parties[0].data, cfg.data.public.spec()
    for spec in (local_spec, public_spec):
        prepare_training_set(spec, cfg.data)
    local, public = open_training_set(local_spec, cfg.data), open_training_set(public_spec, cfg.data)
    cpu, dtype = torch.device("cpu"), torch.float32
    backbone = build_backbone(cfg, cpu, dtype)
    party = OneRank(args.batch, cpu, dtype)
    print(f"CPU: {cpu_model()}; torch threads {torch.get_num_threads()}")
    hard_negative_pass(backbone, local, public, 0.4, party)          # warm-up (allocator, kernels)
    exact = reset_peak()
    before = peak_rss_mb()
    t0 = time.perf_counter()
    chosen = hard_negative_pass(backbone, local, public, 0.4, party)
    seconds = time.perf_counter() - t0
    rise = peak_rss_mb() - before
    n = len(local) + len(public)
    print(f"CPU scale ({args.backbone} width {args.width:g}, {args.image_size} px, d {args.embedding}, batch "
          f"{args.batch}): {len(local)} local + {len(public)} public images: {seconds:.2f} s "
          f"({n / seconds:.0f} images/s, read + decode + forward), {len(chosen)} chosen at 0.4; peak RSS "
          f"{'+' if exact else 'max '}{rise:.1f} MB over the pass")

    paper = load_config(None, [f"model.backbone={args.paper_backbone}", "fed.algorithm=fedavg"])
    net = build_backbone(paper, cpu, dtype).eval()
    images = torch.randn(args.batch, 3, 112, 112)
    with torch.no_grad():
        net(images[:8])
        t0 = time.perf_counter()
        net(images)
        per_image = (time.perf_counter() - t0) / args.batch
    public_images = FEDFR_PUBLIC_IDS * args.public_per_identity
    total = FEDFR_LOCAL + public_images
    held = (FEDFR_LOCAL * D_PAPER + public_images) * 4 / 2**20
    print(f"FedFR scale ({args.paper_backbone}, 112 px, d {D_PAPER}): forward {per_image * 1e3:.1f} ms an image on "
          f"{args.threads} thread(s); a party's pass over {FEDFR_LOCAL} local + {public_images:,.0f} public images: "
          f"{total * per_image / 3600:.2f} h per rank and round (forward alone, R ranks: / R); 40 parties: "
          f"{40 * total:,.0f} forwards a round; held: L + best cosines {held:.1f} MB + one batch's activations")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
