"""Face datasets as the trainer sees them: (image in [-1, 1], party-local label), from RecordIO or folders."""
from __future__ import annotations

import multiprocessing
import sys
from multiprocessing.context import get_spawning_popen
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from .errors import DataError
from .faces_emore import read_layout
from .images import Encoded, normalize, resize
from .partition import partition_hash, split_by_identity
from .recordio import RecordReader

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png"}
_COUNTER_SLOTS = 64


class FaceDataset(torch.utils.data.Dataset):
    """Base: subclasses set `labels` (int64, 0..num_classes-1) and implement `read(i) -> Encoded` (the item's
    image file as stored, its checks done); `load(i)` decodes it to uint8 [3,H,W].

    Indexing takes `i` or `(i, flip)`. With skip_bad, a record that fails to read is counted in
    `bad_records` (shared with DataLoader workers) and the next readable item is returned in its place.
    """

    kind = "dataset"

    def __init__(self, labels: np.ndarray, num_classes: int, image_size: int, skip_bad: bool, open_bad: int = 0):
        self.labels = np.asarray(labels, dtype=np.int64)
        self.num_classes = int(num_classes)
        self.image_size = int(image_size)
        self.skip_bad = bool(skip_bad)
        self.open_bad = int(open_bad)
        # one counter per DataLoader worker (slot 0: the main process), so no lock is needed
        self._read_bad = multiprocessing.RawArray("q", _COUNTER_SLOTS)
        self._warned = False

    def read(self, i: int) -> Encoded:
        raise NotImplementedError

    def load(self, i: int) -> torch.Tensor:
        return self.read(i).decode()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index):
        i, flip = index if isinstance(index, tuple) else (index, False)
        j, image = self.first_readable(i, self.load)
        return normalize(resize(image, self.image_size), bool(flip)), int(self.labels[j])

    def first_readable(self, i, get):
        """(j, get(j)) for the first item j = i, i+1, ... (cyclically) that `get` reads without a DataError; each
        one skipped counted (skip_bad), or the error raised (without)."""
        i = int(i)
        if not 0 <= i < len(self):
            raise IndexError(f"index {i} out of range for {len(self)} images")
        for attempt in range(len(self)):
            j = (i + attempt) % len(self)
            try:
                return j, get(j)
            except DataError as e:
                if not self.skip_bad:
                    raise
                self.count_bad(e)
        raise DataError(self.describe().get("path", "?"), "no readable image left (all records bad)")

    def count_bad(self, error: DataError) -> None:
        if self._read_bad is not None:
            worker = torch.utils.data.get_worker_info()
            self._read_bad[0 if worker is None else 1 + worker.id % (_COUNTER_SLOTS - 1)] += 1
        if not self._warned:
            print(f"skipping bad record: {error}", file=sys.stderr)
            self._warned = True

    @property
    def bad_records(self) -> int:
        """Records skipped so far: dropped when the set was opened plus those that failed to read."""
        return self.open_bad + (sum(self._read_bad) if self._read_bad is not None else 0)

    def __getstate__(self):
        state = dict(self.__dict__)
        if get_spawning_popen() is None:  # a shared counter only travels to processes being started
            state["_read_bad"] = None
        return state

    def subset(self, indices: Sequence[int]) -> "FaceSubset":
        return FaceSubset(self, indices)

    def members(self) -> list[np.ndarray]:
        """Arrays that identify which items of the source this dataset holds (hashed for the run log)."""
        return [self.labels]

    def describe(self) -> dict:
        return {"kind": self.kind, "identities": self.num_classes, "images": len(self),
                "partition_hash": partition_hash(self.members()), "bad_records": self.bad_records}


class RecFaceDataset(FaceDataset):
    """An insightface `train.rec/train.idx` folder, optionally one part of an even split by identity."""

    kind = "rec"

    def __init__(self, folder, image_size: int = 112, skip_bad: bool = False, split_index: int = 0,
                 split_count: int = 1, kind: str = "rec"):
        self.folder = Path(folder)
        self.kind = kind
        self.reader = RecordReader(self.folder / "train.rec", self.folder / "train.idx", skip_bad)
        layout = read_layout(self.reader)
        self.total_identities = layout.num_identities
        self.identities = split_by_identity(layout.num_identities, split_count, split_index)
        self.split = (split_index, split_count)
        chosen = np.isin(layout.labels, self.identities)
        present = np.isin(layout.image_keys[chosen], self.reader.keys)
        self.keys = layout.image_keys[chosen][present]
        self.source_labels = layout.labels[chosen][present]
        self.identity_ids = layout.identity_ids[self.identities]
        dropped = int((~present).sum())
        super().__init__(self.source_labels - self.identities[0], len(self.identities), image_size, skip_bad,
                         open_bad=dropped)

    def read(self, i: int) -> Encoded:
        key = int(self.keys[i])
        header, payload = self.reader.read_ir(key)
        label = float(header.label if header.flag == 0 else header.label[0])
        if not (0 <= label < self.total_identities and label == int(label)):
            raise DataError(self.reader.rec_path, f"label {label:g} out of range 0..{self.total_identities - 1}",
                            key)
        if int(label) != self.source_labels[i]:
            raise DataError(self.reader.rec_path, f"label {int(label)} but the record lies in identity "
                                                  f"{self.source_labels[i]}'s range", key)
        return Encoded(payload, self.reader.rec_path, key)

    def members(self) -> list[np.ndarray]:
        return [self.keys, self.source_labels]

    def describe(self) -> dict:
        lo, hi = int(self.identities[0]), int(self.identities[-1]) + 1
        return {**super().describe(), "path": str(self.folder),
                "split": f"{self.split[0]}/{self.split[1]}", "source_identities": [lo, hi],
                "source_identities_total": self.total_identities}


class FolderFaceDataset(FaceDataset):
    """A root with one sub-folder of images (.jpg/.jpeg/.png) per identity, sorted by name."""

    kind = "folder"

    def __init__(self, root, image_size: int = 112, skip_bad: bool = False, split_index: int = 0,
                 split_count: int = 1):
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"image folder not found: {self.root}")
        names = sorted(d.name for d in self.root.iterdir() if d.is_dir())
        if not names:
            raise DataError(self.root, "no identity sub-folders")
        self.total_identities = len(names)
        self.identities = split_by_identity(len(names), split_count, split_index)
        self.split = (split_index, split_count)
        self.files, labels = [], []
        for new_label, k in enumerate(self.identities):
            images = sorted(p for p in (self.root / names[k]).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
            self.files += images
            labels += [new_label] * len(images)
        self.identity_names = [names[k] for k in self.identities]
        super().__init__(np.array(labels), len(self.identities), image_size, skip_bad)

    def read(self, i: int) -> Encoded:
        path = self.files[i]
        return Encoded(path.read_bytes(), path)

    def members(self) -> list[np.ndarray]:
        return [self.identities, self.labels]

    def describe(self) -> dict:
        return {**super().describe(), "path": str(self.root), "split": f"{self.split[0]}/{self.split[1]}",
                "source_identities": [int(self.identities[0]), int(self.identities[-1]) + 1],
                "source_identities_total": self.total_identities}


class FaceSubset(FaceDataset):
    """Some items of a dataset (e.g. a Dirichlet client's), labels remapped to 0..C'-1 in class order."""

    kind = "subset"

    def __init__(self, base: FaceDataset, indices: Sequence[int]):
        self.base = base
        self.indices = np.asarray(indices, dtype=np.int64)
        classes, labels = np.unique(base.labels[self.indices], return_inverse=True)
        self.base_classes = classes
        super().__init__(labels, len(classes), base.image_size, base.skip_bad)

    def read(self, i: int) -> Encoded:
        return self.base.read(int(self.indices[i]))

    def members(self) -> list[np.ndarray]:
        return [*self.base.members(), self.indices]

    def describe(self) -> dict:
        extra = {"dirichlet": self.partition} if getattr(self, "partition", None) else {}
        return {**super().describe(), **extra, "of": self.base.describe()}


class ConcatFaceDataset(FaceDataset):
    """The union of datasets, labels offset so that every identity stays distinct (centralized baseline)."""

    kind = "concat"

    def __init__(self, datasets: Sequence[FaceDataset]):
        if not datasets:
            raise ValueError("ConcatFaceDataset needs at least one dataset")
        self.datasets = list(datasets)
        sizes = {d.image_size for d in self.datasets}
        if len(sizes) != 1:
            raise ValueError(f"datasets of different image sizes cannot be joined: {sorted(sizes)}")
        self.class_offsets = np.cumsum([0] + [d.num_classes for d in self.datasets])
        self.ends = np.cumsum([len(d) for d in self.datasets])
        labels = np.concatenate([d.labels + off for d, off in zip(self.datasets, self.class_offsets)])
        super().__init__(labels, int(self.class_offsets[-1]), sizes.pop(), all(d.skip_bad for d in self.datasets),
                         open_bad=sum(d.open_bad for d in self.datasets))

    def read(self, i: int) -> Encoded:
        part = int(np.searchsorted(self.ends, i, side="right"))
        start = 0 if part == 0 else int(self.ends[part - 1])
        return self.datasets[part].read(i - start)

    def members(self) -> list[np.ndarray]:
        return [m for d in self.datasets for m in d.members()]

    def describe(self) -> dict:
        return {**super().describe(), "parts": [d.describe() for d in self.datasets]}
