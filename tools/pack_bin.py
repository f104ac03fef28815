"""Pack verification pairs into an insightface `.bin` pair set (pickle of image bytes and issame flags).

    python -m tools.pack_bin pairs.txt out/lfw.bin --root images/

pairs.txt has one pair per line: `IMAGE_A IMAGE_B SAME`, SAME being 1 or 0 (paths relative to --root;
blank lines and lines starting with # are skipped). Keep the real sets' layout if you want their
protocol: 10 contiguous folds, each its same-identity pairs first. Image bytes are stored unchanged.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedmpi.data.verification_bin import write_bin


def read_pair_list(path: Path, root: Path) -> tuple[list[Path], list[bool]]:
    images, same = [], []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) != 3 or fields[2] not in ("0", "1"):
            raise SystemExit(f"pack_bin: {path} line {n}: expected 'IMAGE_A IMAGE_B 0|1', got {line.strip()!r}")
        for name in fields[:2]:
            if not (root / name).is_file():
                raise SystemExit(f"pack_bin: {path} line {n}: image not found: {root / name}")
        images += [root / fields[0], root / fields[1]]
        same.append(fields[2] == "1")
    if not same:
        raise SystemExit(f"pack_bin: no pairs in {path}")
    return images, same


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.pack_bin", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pairs", type=Path, help="text file: IMAGE_A IMAGE_B SAME per line")
    ap.add_argument("out", type=Path, help="the .bin file to write")
    ap.add_argument("--root", type=Path, default=Path("."), help="folder the image paths are relative to")
    args = ap.parse_args(argv)
    images, same = read_pair_list(args.pairs, args.root)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_bin(args.out, [p.read_bytes() for p in images], same)
    print(f"wrote {args.out}: {len(same)} pairs ({sum(same)} same, {len(same) - sum(same)} different)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
