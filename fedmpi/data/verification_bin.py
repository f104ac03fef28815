"""insightface verification pair sets (`lfw.bin`, `cfp_fp.bin`, ...): a pickle of (images, issame).

`images` holds 2N encoded images (pair i is images 2i, 2i+1); `issame` holds N booleans. Python 2 era files
hold byte strings, newer ones bytes or uint8 numpy arrays. The pickle is read with an unpickler that admits
only the globals those objects need, so a crafted file cannot run code.
"""
from __future__ import annotations

import codecs
import io
import pickle
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from .errors import DataError
from .images import decode, resize

try:  # numpy >= 1.26 names its internals numpy._core; files written by numpy 1.x name numpy.core
    from numpy._core import multiarray as _multiarray, numeric as _numeric
except ImportError:  # pragma: no cover
    from numpy.core import multiarray as _multiarray, numeric as _numeric


def _dtype(*args, **kwargs):
    dt = np.dtype(*args, **kwargs)
    if dt.hasobject:
        raise pickle.UnpicklingError(f"object dtype {dt} is not admitted")
    return dt


def _latin1_encode(text, encoding="latin1"):
    # Protocol 2 pickles of bytes written by Python 3 call _codecs.encode(str, 'latin1').
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise pickle.UnpicklingError(f"_codecs.encode admitted only for latin1 text, got {encoding!r}")
    return codecs.encode(text, "latin1")


_NUMPY_ARRAY = {"_reconstruct": _multiarray._reconstruct, "scalar": _multiarray.scalar}
ADMITTED_GLOBALS = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): _dtype,
    ("_codecs", "encode"): _latin1_encode,
    **{(m, name): f for m in ("numpy.core.multiarray", "numpy._core.multiarray") for name, f in _NUMPY_ARRAY.items()},
    **{(m, "_frombuffer"): _numeric._frombuffer for m in ("numpy.core.numeric", "numpy._core.numeric")},
}


class _PairSetUnpickler(pickle.Unpickler):
    def __init__(self, file, path):
        super().__init__(file, encoding="bytes")
        self.path = path

    def find_class(self, module, name):
        try:
            return ADMITTED_GLOBALS[(module, name)]
        except KeyError:
            raise DataError(self.path, f"refused pickle global {module}.{name}: a .bin pair set holds only "
                                       f"bytes, lists, tuples, bools, ints and numpy arrays") from None

    def persistent_load(self, pid):
        raise DataError(self.path, "refused pickle persistent id: not part of a .bin pair set")


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


def load_bin(path, image_size: int = 112) -> tuple[torch.Tensor, np.ndarray]:
    """(uint8 [2N, 3, S, S] images, bool [N] issame) of a `.bin` pair set, images resized to S if needed."""
    images, same = read_pairs(path)
    out = torch.empty((len(images), 3, image_size, image_size), dtype=torch.uint8)
    for i, data in enumerate(images):
        out[i] = resize(decode(data, path, record=i), image_size)
    return out, same


def write_bin(path, images: Sequence[bytes], issame: Sequence[bool]) -> None:
    """Write a `.bin` pair set as insightface does: pickle of (list of bytes, list of bool)."""
    images, issame = [bytes(b) for b in images], [bool(s) for s in issame]
    if len(images) != 2 * len(issame):
        raise ValueError(f"{len(images)} images for {len(issame)} pairs (expected {2 * len(issame)})")
    with open(path, "wb") as f:
        pickle.dump((images, issame), f, protocol=pickle.HIGHEST_PROTOCOL)
