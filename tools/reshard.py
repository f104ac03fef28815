"""`python -m tools.reshard CHECKPOINT --layout CONFIG [key=val ...] [--out DIR]`

Re-split a checkpoint offline for the layout of CONFIG (with its dotted overrides, e.g. parties.ms1m.ranks=4
parties.ms1m.batch_size=64): each party whose rank count differs gets new parts, its classifier's class
centres and their momentum split in contiguous blocks over its new ranks (fedmpi/relayout). The result is a
checkpoint folder (default: CHECKPOINT-<layout>, beside it) that `python -m fedmpi.run --config CONFIG ...
--resume DIR` continues as a checkpoint of its own layout. A party whose batch per step (ranks x batch per
rank) would change is refused, as the resume refuses it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedmpi.config import ConfigError, load_config
from fedmpi.store.manifest import ResumeError, check_complete, resolve_checkpoint


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.reshard", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="checkpoint folder, or a run/ckpt folder (its newest complete one)")
    parser.add_argument("--layout", required=True, metavar="CONFIG", help="the config of the run that resumes")
    parser.add_argument("overrides", nargs="*", help="dotted overrides of CONFIG, e.g. parties.ms1m.ranks=4")
    parser.add_argument("--out", default=None, help="the new checkpoint folder (must not exist)")
    args = parser.parse_intermixed_args(argv)
    from fedmpi.layout import build_layout
    from fedmpi.relayout.offline import reshard_checkpoint
    from fedmpi.store.party_batches import check_party_batches
    from fedmpi.store.resume import check_compatible, saved_config

    try:
        cfg = load_config(args.layout, args.overrides)
        layout = build_layout(cfg)
        folder = resolve_checkpoint(Path(args.checkpoint))
        manifest = check_complete(folder)
        check_compatible(folder, manifest, cfg, layout)
        check_party_batches(folder, manifest, saved_config(folder), cfg, layout, allowed=False)
        counts = "-".join(str(len(p.ranks)) for p in layout.parties)
        out = Path(args.out) if args.out else folder.with_name(f"{folder.name}-ranks-{counts}")
        changed = reshard_checkpoint(folder, out, cfg, layout)
    except (ConfigError, ResumeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    moved = ", ".join(f"{name} {a} -> {b} ranks" for name, (a, b) in changed.items()) or "no party changed"
    print(f"{out}: {moved}; resume with --resume {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
