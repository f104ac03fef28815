"""The insightface (faces_emore / MS1MV2) layout of an indexed RecordIO training set.

record 0            IRHeader flag=2, labels [first identity record, end]
records 1..N        one image each: label = identity (float), payload = JPEG
records N+1..end    one per identity k: labels [start, end) = its image records, in identity order

Files without a header record (flag 0 at record 0) are read as plain labelled images: every indexed key
is an image and the classes are the labels found in the headers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from .errors import DataError
from .recordio import RecordReader, RecordWriter, pack_ir

# Record keys and ranges are stored as float32 labels: exact only below 2^24.
_FLOAT32_EXACT = 1 << 24


@dataclass
class RecLayout:
    image_keys: np.ndarray                 # int64 [N]: record keys of the images
    labels: np.ndarray                     # int64 [N]: identity of each image, 0..C-1
    ranges: np.ndarray                     # int64 [C, 2]: [start, end) image record keys per identity
    identity_ids: np.ndarray = field(default=None)  # uint64 [C]: id2 of each identity record (0 if unset)
    has_header: bool = True

    @property
    def num_identities(self) -> int:
        return len(self.ranges)


def write_faces_emore(rec_path, idx_path, identities: Sequence[Sequence[bytes | Path]],
                      identity_ids: Sequence[int] | None = None) -> tuple[int, int]:
    """Write images grouped by identity in the faces_emore layout; returns (images, identities).

    An image is its encoded bytes or a Path to read them from (read one at a time, so large folders stream).
    """
    if len(identities) == 0 or any(len(g) == 0 for g in identities):
        raise ValueError("write_faces_emore needs at least one identity and one image per identity")
    n_images = sum(len(g) for g in identities)
    first_identity = n_images + 1
    end = first_identity + len(identities)
    if end >= _FLOAT32_EXACT:
        raise ValueError(f"{end} records exceed what float32 labels hold exactly (2^24)")
    ids = list(identity_ids) if identity_ids is not None else [0] * len(identities)
    with RecordWriter(rec_path, idx_path) as w:
        w.write(0, pack_ir([first_identity, end], 0, 0, b""))
        key = 1
        ranges = []
        for label, images in enumerate(identities):
            ranges.append((key, key + len(images)))
            for image in images:
                data = image.read_bytes() if isinstance(image, Path) else bytes(image)
                w.write(key, pack_ir(float(label), key, 0, data))
                key += 1
        for k, (start, stop) in enumerate(ranges):
            w.write(first_identity + k, pack_ir([start, stop], first_identity + k, int(ids[k]), b""))
    return n_images, len(identities)


def read_layout(reader: RecordReader) -> RecLayout:
    """Identity ranges and per-image labels, from the header records (or every header when there are none)."""
    path = reader.rec_path
    if 0 not in reader:
        raise DataError(path, f"no record 0 in {reader.idx_path.name}")
    header, _ = reader.read_ir(0)
    if header.flag == 0:
        return _layout_without_header(reader)
    if header.flag < 2:
        raise DataError(path, f"header record has {header.flag} label(s), expected 2", 0)
    first, end = int(header.label[0]), int(header.label[1])
    if not 1 <= first <= end:
        raise DataError(path, f"header record labels [{first}, {end}] are not a valid identity range", 0)
    ranges = np.zeros((end - first, 2), dtype=np.int64)
    ids = np.zeros(end - first, dtype=np.uint64)
    for k, key in enumerate(range(first, end)):
        h, _ = reader.read_ir(key)
        if h.flag < 2:
            raise DataError(path, "identity record has no [start, end) labels", key)
        start, stop = int(h.label[0]), int(h.label[1])
        if not 1 <= start < stop <= first:
            raise DataError(path, f"identity range [{start}, {stop}) lies outside the image records "
                                  f"[1, {first})", key)
        ranges[k] = (start, stop)
        ids[k] = h.id2
    counts = ranges[:, 1] - ranges[:, 0]
    # every identity's keys start..stop-1, laid end to end (one arange, not one per identity)
    image_keys = np.arange(counts.sum()) + np.repeat(ranges[:, 0] - (np.cumsum(counts) - counts), counts)
    labels = np.repeat(np.arange(len(ranges)), counts)
    return RecLayout(image_keys.astype(np.int64), labels.astype(np.int64), ranges, ids, True)


def _layout_without_header(reader: RecordReader) -> RecLayout:
    keys = np.sort(reader.keys)
    labels = np.empty(len(keys), dtype=np.int64)
    for i, key in enumerate(keys):
        h, _ = reader.read_ir(key)
        label = float(h.label if h.flag == 0 else h.label[0])
        if label < 0 or label != int(label):
            raise DataError(reader.rec_path, f"label {label} is not a class index", int(key))
        labels[i] = int(label)
    order = np.argsort(labels, kind="stable")
    keys, labels = keys[order], labels[order]
    classes, starts = np.unique(labels, return_index=True)
    if len(classes) and (classes != np.arange(len(classes))).any():
        raise DataError(reader.rec_path, f"labels are not 0..C-1 ({len(classes)} classes, max {classes[-1]})")
    ends = np.append(starts[1:], len(keys))
    # Without identity records the ranges are positions in image_keys, not record keys.
    return RecLayout(keys, labels, np.stack([starts, ends], 1).astype(np.int64),
                     np.zeros(len(classes), np.uint64), False)
