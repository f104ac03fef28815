"""Pack an image folder (one sub-folder per identity) into insightface RecordIO: OUT_PREFIX.rec/.idx.

    python -m tools.pack_rec faces/ data/mine/train     # -> data/mine/train.rec, data/mine/train.idx

The layout is faces_emore's (header record 0, image records with their identity as label, one range record
per identity), so the result trains as `kind: rec, path: data/mine`. Image bytes are stored unchanged (JPEG or PNG) and
read one at a time, so large folders stream.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedmpi.data.face_dataset import IMAGE_SUFFIXES
from fedmpi.data.faces_emore import write_faces_emore


def list_identities(root: Path) -> list[tuple[str, list[Path]]]:
    if not root.is_dir():
        raise SystemExit(f"pack_rec: {root} is not a folder")
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        images = sorted(p for p in d.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if images:
            out.append((d.name, images))
    if not out:
        raise SystemExit(f"pack_rec: no identity sub-folders with .jpg/.jpeg/.png images in {root}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.pack_rec", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("image_folder", type=Path, help="root with one sub-folder of images per identity")
    ap.add_argument("out_prefix", type=Path, help="writes OUT_PREFIX.rec and OUT_PREFIX.idx")
    args = ap.parse_args(argv)
    identities = list_identities(args.image_folder)
    args.out_prefix.parent.mkdir(parents=True, exist_ok=True)
    rec, idx = (args.out_prefix.parent / (args.out_prefix.name + suffix) for suffix in (".rec", ".idx"))
    n_images, n_ids = write_faces_emore(rec, idx, [files for _, files in identities])
    print(f"wrote {rec} and {idx}: {n_images} images of {n_ids} identities")
    return 0


if __name__ == "__main__":
    sys.exit(main())
