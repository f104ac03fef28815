"""`python -m tools.evaluate MODEL --pairs A.bin [B.bin ...]` and/or `--ijbb ROOT --ijbc ROOT --megaface ROOT`

Pair sets (`--pairs`, LFW-style `.bin` files such as tools.pack_bin writes): 10-fold accuracy ± std and TAR at
--fars per set, by the in-run evaluation's code (fedmpi/protocols/pair_sets.py); `--folds held-out --fv-folds F`
gives exactly the numbers a run logs in /eval; `--flip none` scores the images without their flipped copies
(default: the flip-sum, as insightface's eval/verification.py). Prints the table and writes OUT/pairs.md
(and OUT/pairs.json, every digit).

The large-scale benchmarks of a trained backbone, post hoc: IJB-B / IJB-C 1:1 template verification
(TAR at FAR 1e-6 ... 1e-1) and MegaFace rank-1 identification at 10^1 ... 10^6 distractors with TAR at
FAR = 1e-6 on insightface's refined lists. Every choice follows insightface's evaluation code by default; the
--no-detection-score, --normalize-images, --tar-reading strict and --drop-noisy-distractors flags name the
others, and each report names the choices it was computed with. Prints the table papers print and writes OUT/<benchmark>.h5
(metrics, counts, ROC) and OUT/<benchmark>_roc.png.

CHECKPOINT_OR_PTH: a checkpoint folder (or a run / ckpt folder: its newest complete checkpoint) or an
insightface-layout state_dict (.pth). Under mpirun with several benchmarks, rank k evaluates every
(world size)-th of them, starting with the k-th, and rank 0 prints the table.

--make-fixtures writes synthetic releases in the official layouts at the given ROOTs first (where missing),
so the whole path runs without the real sets:
    python -m tools.evaluate runs/demo --make-fixtures --ijbb data/bench/IJBB --ijbc data/bench/IJBC \\
        --megaface data/bench/megaface
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedmpi.metrics.roc import TAR_READINGS
from fedmpi.metrics.verification import FV_FOLD_CHOICES
from fedmpi.protocols import BENCHMARKS
from fedmpi.protocols.pair_sets import FLIPS, FOLDS


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tools.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("backbone", metavar="MODEL", help="checkpoint / run folder, or a .pth state_dict")
    parser.add_argument("--pairs", nargs="+", metavar="BIN", default=[], help="LFW-style .bin pair sets to score")
    parser.add_argument("--folds", choices=FOLDS, default="all",
                        help="pair sets: all 10 folds (insightface, default) or the run's held-out 5")
    parser.add_argument("--fv-folds", choices=FV_FOLD_CHOICES, default="first",
                        help="pair sets with --folds held-out: the run's fv.folds (default: %(default)s)")
    parser.add_argument("--flip", choices=FLIPS, default="sum",
                        help="pair sets: f(x) + f(flipped x) (default, as insightface) or f(x) alone")
    parser.add_argument("--fars", nargs="+", type=float, default=[1e-3, 1e-2], metavar="FAR",
                        help="pair sets: TAR at these FARs (default: 1e-3 1e-2, as the run logs)")
    for name in BENCHMARKS:
        parser.add_argument(f"--{name}", metavar="ROOT", help=f"the {name} release folder")
    parser.add_argument("--out", default="benchmark-results", help="where reports go (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--workers", type=int, default=0, help="image decoding/alignment worker processes")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--no-detection-score", action="store_true",
                        help="IJB: do not weight image features by their detection score (insightface does)")
    parser.add_argument("--normalize-images", action="store_true",
                        help="IJB: L2-normalise each image feature before pooling (insightface keeps its norm)")
    parser.add_argument("--tar-reading", choices=TAR_READINGS, default="insightface",
                        help="IJB: TAR at the ROC point of nearest FPR (insightface, default) or at the lowest "
                             "threshold with at most floor(FAR*n) false accepts (strict)")
    parser.add_argument("--no-refine", action="store_true", help="MegaFace: ignore the refined (noise) lists")
    parser.add_argument("--drop-noisy-distractors", action="store_true",
                        help="MegaFace: remove the listed noisy distractors (insightface keeps them; they never win)")
    parser.add_argument("--make-fixtures", action="store_true",
                        help="write synthetic releases at the given ROOTs first (where missing)")
    parser.add_argument("--fixture-seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.sets = {n: getattr(args, n) for n in BENCHMARKS if getattr(args, n)}
    if not args.sets and not args.pairs:
        parser.error("name what to evaluate on: --pairs A.bin ..., --ijbb ROOT, --ijbc ROOT or --megaface ROOT")
    return args


def make_fixtures(sets: dict[str, str], image_size: int, seed: int) -> None:
    from fedmpi.protocols.fixtures import write_ijb, write_megaface

    for name, root in sets.items():
        if Path(root).exists():
            continue
        if name == "megaface":
            write_megaface(Path(root), image_size, seed)
        else:
            write_ijb(Path(root), name, image_size, seed)
        print(f"{root}: synthetic {name} release written", flush=True)


def evaluate_sets(args, names: list[str], say=print, pairs: bool = True) -> dict[str, dict[str, float]]:
    """Evaluate the named benchmarks of args.sets (and the pair sets, `pairs`); write their reports; return
    {benchmark: metrics}."""
    import torch

    from fedmpi.protocols import build_protocol
    from fedmpi.protocols.backbone_file import load_backbone
    from fedmpi.protocols.report import write_report

    backbone, image_size, description = load_backbone(args.backbone)
    backbone = backbone.to(torch.device(args.device))
    results = {}
    if args.pairs and pairs:
        from fedmpi.protocols.pair_sets import write_pairs_report

        say(write_pairs_report(backbone, image_size, description, args.pairs, Path(args.out), folds=args.folds,
                               fv_folds=args.fv_folds, flip=args.flip, fars=args.fars, batch_size=args.batch_size,
                               device=args.device))
    for name in names:
        protocol = build_protocol(name, args.sets[name], image_size, batch_size=args.batch_size,
                                  device=args.device, workers=args.workers,
                                  detection_weighting=not args.no_detection_score,
                                  keep_feature_norm=not args.normalize_images, tar_reading=args.tar_reading,
                                  refined=not args.no_refine,
                                  noisy_distractors="drop" if args.drop_noisy_distractors else "never_win")
        say(protocol.describe())
        results[name] = protocol.evaluate(backbone)
        for path in write_report(Path(args.out), name, protocol.last, description):
            say(f"wrote {path}")
    return results


def pair_sets_hint(sets: dict[str, str]) -> str:
    """A benchmark ROOT that holds .bin pair sets was meant for --pairs: say so."""
    bins = sorted(str(p) for root in sets.values() if Path(root).is_dir() for p in Path(root).glob("*.bin"))
    return f"; the .bin pair sets there are scored with --pairs {' '.join(bins)}" if bins else ""


def main(argv=None) -> int:
    args = parse_args(argv)
    names = list(args.sets)
    from fedmpi.protocols.report import format_table

    from fedmpi.data.errors import DataError
    from fedmpi.protocols.backbone_file import BackboneFileError
    from fedmpi.store.checkpoint import ResumeError

    try:
        from fedmpi.comm.start import start_mpi
        world = start_mpi().COMM_WORLD
    except ImportError:
        world = None
    if world is not None and world.Get_size() > 1:
        return _main_mpi(args, names, world)
    try:
        if args.make_fixtures:
            from fedmpi.protocols.backbone_file import load_backbone
            make_fixtures(args.sets, load_backbone(args.backbone)[1], args.fixture_seed)
        results = evaluate_sets(args, names)
    except (DataError, BackboneFileError, ResumeError, ValueError, OSError) as exc:
        print(f"error: {exc}{pair_sets_hint(args.sets)}", file=sys.stderr)
        return 1
    if results:
        print(format_table(results))
    return 0


def _main_mpi(args, names, world) -> int:
    from fedmpi import comm
    from fedmpi.protocols.report import format_table

    rank, size = world.Get_rank(), world.Get_size()

    def work():
        if args.make_fixtures and rank == 0:
            from fedmpi.protocols.backbone_file import load_backbone
            make_fixtures(args.sets, load_backbone(args.backbone)[1], args.fixture_seed)
        world.Barrier()
        mine = names[rank::size]
        results = evaluate_sets(args, mine, say=lambda text: print(f"rank {rank}: {text}", flush=True),
                                pairs=rank == 0)   # the pair sets on rank 0
        gathered = world.gather(results, root=0)
        if rank == 0 and names:
            merged = {k: v for part in gathered for k, v in part.items()}
            print(format_table({n: merged[n] for n in names}), flush=True)
        return 0

    return comm.run_guarded("evaluate", work)


if __name__ == "__main__":
    sys.exit(main())
