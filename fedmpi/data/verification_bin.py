"""insightface verification pair sets (`lfw.bin`, `cfp_fp.bin`, ...): a pickle of (images, issame).

`images` holds 2N encoded images (pair i is images 2i, 2i+1); `issame` holds N booleans. Python 2 era files
hold byte strings, newer ones bytes or uint8 numpy arrays. The pickle is read with an unpickler that admits
only the globals those objects need, so a crafted file cannot run code.
"""
from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from .errors import DataError
from .images import decode, resize
from .safe_pickle import PlainDataUnpickler

_PAIR_SET_HOLDS = "a .bin pair set holds only bytes, lists, tuples, bools, ints and numpy arrays"


def _PairSetUnpickler(file, path):
    return PlainDataUnpickler(file, path, _PAIR_SET_HOLDS)


def _flag(value) -> bool:
    """An issame entry: a bool (or numpy bool, or the integers 0 and 1); a string is refused, not truth-tested."""
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and value in (0, 1)):
        return bool(value)
    raise TypeError(f"issame holds {value!r}, not a boolean")


def read_pairs(path) -> tuple[list[bytes], np.ndarray]:
    """(2N encoded images as bytes, issame bool [N]) from a `.bin` file, checked for shape."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"verification set not found: {path}")
    try:
        obj = _PairSetUnpickler(io.BytesIO(path.read_bytes()), path).load()
    except DataError:
        raise
    except Exception as e:
        raise DataError(path, f"not a readable pickle ({type(e).__name__}: {e})") from None
    if not (isinstance(obj, (tuple, list)) and len(obj) == 2):
        raise DataError(path, f"expected a pickled (images, issame) pair, got {type(obj).__name__}")
    bins, issame = obj
    try:
        images = [b if isinstance(b, bytes) else np.asarray(b, dtype=np.uint8).tobytes() for b in bins]
        same = np.array([_flag(s) for s in issame], dtype=bool)
    except (TypeError, ValueError) as e:
        raise DataError(path, f"images must be byte strings and issame booleans ({e})") from None
    if not len(same):
        raise DataError(path, "holds no pairs (issame is empty)")
    if len(images) != 2 * len(same):
        raise DataError(path, f"{len(images)} images for {len(same)} pairs (expected {2 * len(same)})")
    return images, same


def decode_pairs(path, images: Sequence[bytes], image_size: int) -> torch.Tensor:
    """uint8 [2N, 3, S, S]: the encoded images of `read_pairs(path)`, decoded and resized to S if needed."""
    out = torch.empty((len(images), 3, image_size, image_size), dtype=torch.uint8)
    for i, data in enumerate(images):
        out[i] = resize(decode(data, path, record=i), image_size)
    return out


def load_bin(path, image_size: int = 112) -> tuple[torch.Tensor, np.ndarray]:
    """(uint8 [2N, 3, S, S] images, bool [N] issame) of a `.bin` pair set, images resized to S if needed."""
    images, same = read_pairs(path)
    return decode_pairs(path, images, image_size), same


def write_bin(path, images: Sequence[bytes], issame: Sequence[bool]) -> None:
    """Write a `.bin` pair set as insightface does: pickle of (list of bytes, list of bool)."""
    images, issame = [bytes(b) for b in images], [bool(s) for s in issame]
    if len(images) != 2 * len(issame):
        raise ValueError(f"{len(images)} images for {len(issame)} pairs (expected {2 * len(issame)})")
    with open(path, "wb") as f:
        pickle.dump((images, issame), f, protocol=pickle.HIGHEST_PROTOCOL)
