"""CIFAR-10 in torchvision's `cifar-10-batches-py` layout: `data_batch_1..5` and `test_batch` (each a pickled
dict with `data` uint8 [N, 3072], rows R,G,B planes of 32x32, and `labels` [N]) and `batches.meta`
(`label_names`). The pickles are read through the plain-data unpickler; instead of md5 sums the shapes, dtypes
and label ranges are checked, so a re-packed copy loads. Every error is one line naming the file."""
from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import DataError
from .safe_pickle import load_plain_pickle

FOLDER = "cifar-10-batches-py"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
META_FILE = "batches.meta"
CLASSES = 10
SHAPE = (3, 32, 32)
HOLDS = "a CIFAR-10 batch holds only dicts, lists, strings, ints and numpy arrays"


@dataclass
class ImageSet:
    images: np.ndarray   # uint8 [N, 3, 32, 32]
    labels: np.ndarray   # int64 [N]

    def __len__(self) -> int:
        return len(self.labels)


def batches_folder(path) -> Path:
    """The folder holding the batch files: `path` itself or its `cifar-10-batches-py` sub-folder."""
    path = Path(path)
    return path / FOLDER if (path / FOLDER).is_dir() and not (path / TEST_FILE).exists() else path


def _load(path: Path) -> dict:
    if not path.is_file():
        raise DataError(path, f"missing: a {FOLDER} folder holds {', '.join(TRAIN_FILES)}, {TEST_FILE} and "
                              f"{META_FILE}")
    obj = load_plain_pickle(path, HOLDS, encoding="latin1")  # latin1: how the Python 2 originals load
    if not isinstance(obj, dict):
        raise DataError(path, f"expected a pickled dict, got {type(obj).__name__}")
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in obj.items()}


def read_batch(path) -> ImageSet:
    """One batch file: images uint8 [N, 3, 32, 32], labels int64 [N] in 0..9."""
    path = Path(path)
    batch = _load(path)
    for key in ("data", "labels"):
        if key not in batch:
            raise DataError(path, f"no {key!r} entry (entries: {', '.join(map(str, batch))})")
    data = batch["data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim not in (2, 4) \
            or data.shape[1:] not in ((int(np.prod(SHAPE)),), SHAPE):
        what = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DataError(path, f"'data' must be a uint8 array of shape (N, 3072), got {what}")
    try:
        labels = np.asarray(batch["labels"], dtype=np.int64)
    except (TypeError, ValueError) as e:
        raise DataError(path, f"'labels' must be integers ({e})") from None
    if labels.shape != (len(data),):
        raise DataError(path, f"{len(data)} images but 'labels' has shape {labels.shape}")
    if len(labels) and not (0 <= labels.min() and labels.max() < CLASSES):
        raise DataError(path, f"labels must lie in 0..{CLASSES - 1}, found {labels.min()}..{labels.max()}")
    return ImageSet(np.ascontiguousarray(data.reshape(len(data), *SHAPE)), labels)


def read_label_names(path) -> list[str]:
    path = Path(path)
    names = _load(path).get("label_names")
    if not (isinstance(names, list) and len(names) == CLASSES and all(isinstance(n, (str, bytes)) for n in names)):
        raise DataError(path, f"'label_names' must be a list of {CLASSES} strings")
    return [n.decode("latin1") if isinstance(n, bytes) else n for n in names]


def load_cifar10(path) -> tuple[ImageSet, ImageSet, list[str]]:
    """(train, test, label names) of a `cifar-10-batches-py` folder (or its parent)."""
    folder = batches_folder(path)
    names = read_label_names(folder / META_FILE)
    parts = [read_batch(folder / f) for f in TRAIN_FILES]
    train = ImageSet(np.concatenate([p.images for p in parts]), np.concatenate([p.labels for p in parts]))
    return train, read_batch(folder / TEST_FILE), names


def write_batch(path, images: np.ndarray, labels: np.ndarray, batch_label: str) -> None:
    """A batch file as the original CIFAR-10 distribution lays it out (pickle protocol 2)."""
    images = np.ascontiguousarray(images, dtype=np.uint8).reshape(len(images), -1)
    entry = {"batch_label": batch_label, "labels": [int(v) for v in labels], "data": images,
             "filenames": [f"{batch_label.replace(' ', '_')}_{i:05d}.png" for i in range(len(images))]}
    with open(path, "wb") as f:
        pickle.dump(entry, f, protocol=2)


def write_cifar10(folder, train: ImageSet, test: ImageSet, label_names: list[str]) -> Path:
    """Write train (split over 5 batch files), test and meta in the `cifar-10-batches-py` layout."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / META_FILE, "wb") as f:
        pickle.dump({"label_names": list(label_names), "num_cases_per_batch": -(-len(train) // 5),
                     "num_vis": int(np.prod(SHAPE))}, f, protocol=2)
    bounds = np.linspace(0, len(train), 6).astype(int)
    for i, name in enumerate(TRAIN_FILES):
        lo, hi = bounds[i], bounds[i + 1]
        write_batch(folder / name, train.images[lo:hi], train.labels[lo:hi], f"training batch {i + 1} of 5")
    write_batch(folder / TEST_FILE, test.images, test.labels, "testing batch 1 of 1")
    return folder
