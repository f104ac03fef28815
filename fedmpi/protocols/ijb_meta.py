"""The IJB-B / IJB-C 1:1 verification release as insightface distributes it:

  ROOT/meta/ijbc_face_tid_mid.txt          one line per image: NAME TEMPLATE_ID MEDIA_ID
  ROOT/meta/ijbc_name_5pts_score.txt       one line per image: NAME x1 y1 ... x5 y5 DETECTION_SCORE
  ROOT/meta/ijbc_template_pair_label.txt   one line per template pair: TEMPLATE_ID TEMPLATE_ID LABEL (1 same)
  ROOT/loose_crop/NAME                     the image (landmarks are pixel coordinates in it)

(ijbb_... for IJB-B). Images are matched to their landmarks by NAME, not by line order.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedmpi.protocols.tables import (LineError, as_number, nonblank_line_numbers, read_int_columns, read_rows,
                                     require_file)

KINDS = ("ijbb", "ijbc")


def meta_paths(root: Path, kind: str) -> dict[str, Path]:
    if kind not in KINDS:
        raise ValueError(f"unknown IJB release {kind!r}: expected one of {', '.join(KINDS)}")
    meta = Path(root) / "meta"
    return {"tid_mid": meta / f"{kind}_face_tid_mid.txt", "landmarks": meta / f"{kind}_name_5pts_score.txt",
            "pairs": meta / f"{kind}_template_pair_label.txt"}


@dataclass
class IJBMeta:
    names: list[str]              # image file names under loose_crop/, in face_tid_mid order
    templates: np.ndarray         # int64 [N] template id of each image
    media: np.ndarray             # int64 [N] media id of each image
    landmarks: np.ndarray         # float64 [N, 5, 2]
    detection: np.ndarray         # float64 [N] detection (faceness) score
    template_ids: np.ndarray      # int64 [T] sorted distinct template ids
    first: np.ndarray             # int64 [P] index into template_ids of each pair's first template
    second: np.ndarray            # int64 [P]
    same: np.ndarray              # bool [P]


def read_face_tid_mid(path: Path):
    names, templates, media = [], [], []
    for number, (name, tid, mid) in read_rows(path, 3, "NAME TEMPLATE_ID MEDIA_ID"):
        names.append(name)
        templates.append(as_number(path, number, tid))
        media.append(as_number(path, number, mid))
    return names, np.array(templates, np.int64), np.array(media, np.int64)


def read_landmarks(path: Path) -> dict[str, tuple[np.ndarray, float]]:
    rows = {}
    for number, parts in read_rows(path, 12, "NAME, five x y landmark points, detection score"):
        values = [as_number(path, number, p, float) for p in parts[1:]]
        rows[parts[0]] = (np.array(values[:10]).reshape(5, 2), values[10])
    return rows


def read_pairs(path: Path, template_ids: np.ndarray):
    table = read_int_columns(path, 3, "TEMPLATE_ID TEMPLATE_ID LABEL")
    if len(table) == 0:
        raise LineError(path, 1, "no template pairs")
    bad_label = np.flatnonzero(~np.isin(table[:, 2], (0, 1)))
    if len(bad_label):
        line = nonblank_line_numbers(path, bad_label[:1])[0]
        raise LineError(path, line, f"label {table[bad_label[0], 2]} is not 0 or 1")
    index = np.searchsorted(template_ids, table[:, :2]).clip(0, len(template_ids) - 1)
    unknown = template_ids[index] != table[:, :2]
    if unknown.any():
        row, column = np.argwhere(unknown)[0]
        line = nonblank_line_numbers(path, [row])[0]
        raise LineError(path, line, f"template {table[row, column]} is not in the face_tid_mid file")
    return index[:, 0], index[:, 1], table[:, 2].astype(bool)


def read_ijb_meta(root: Path, kind: str) -> IJBMeta:
    paths = meta_paths(root, kind)
    for what, path in (("images, templates and media", paths["tid_mid"]),
                       ("landmarks and detection scores", paths["landmarks"]),
                       ("template pairs", paths["pairs"])):
        require_file(path, f"IJB meta file: {what}")
    names, templates, media = read_face_tid_mid(paths["tid_mid"])
    if not names:
        raise LineError(paths["tid_mid"], 1, "no images")
    points = read_landmarks(paths["landmarks"])
    missing = [i for i, name in enumerate(names) if name not in points]
    if missing:
        line = nonblank_line_numbers(paths["tid_mid"], missing[:1])[0]
        raise LineError(paths["tid_mid"], line, f"image {names[missing[0]]} has no line in {paths['landmarks'].name}")
    landmarks = np.stack([points[n][0] for n in names])
    detection = np.array([points[n][1] for n in names])
    template_ids = np.unique(templates)
    first, second, same = read_pairs(paths["pairs"], template_ids)
    return IJBMeta(names, templates, media, landmarks, detection, template_ids, first, second, same)
