"""An unpickler that admits only plain data: bytes, str, numbers, lists, tuples, dicts and numpy arrays of
non-object dtypes. Data formats that are pickles (insightface `.bin` pair sets, CIFAR batches) are read through
it, so a crafted file cannot run code. Every refusal is a DataError naming the file."""
from __future__ import annotations

import codecs
import io
import pickle
from pathlib import Path

import numpy as np

from .errors import DataError

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


class PlainDataUnpickler(pickle.Unpickler):
    """`holds` completes the refusal message: "a <format> holds only ..."."""

    def __init__(self, file, path, holds: str, encoding: str = "bytes"):
        super().__init__(file, encoding=encoding)
        self.path = path
        self.holds = holds

    def find_class(self, module, name):
        try:
            return ADMITTED_GLOBALS[(module, name)]
        except KeyError:
            raise DataError(self.path, f"refused pickle global {module}.{name}: {self.holds}") from None

    def persistent_load(self, pid):
        raise DataError(self.path, f"refused pickle persistent id: {self.holds}")


def load_plain_pickle(path, holds: str, encoding: str = "bytes"):
    """The object pickled in `path`, read with PlainDataUnpickler; any failure is one DataError naming it."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DataError(path, f"cannot be read ({e.strerror or e})") from None
    try:
        return PlainDataUnpickler(io.BytesIO(data), path, holds, encoding).load()
    except DataError:
        raise
    except Exception as e:
        raise DataError(path, f"not a readable pickle ({type(e).__name__}: {e})") from None
