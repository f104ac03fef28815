"""A checkpoint write that fails because its volume is full is named as such (the checkpoint folder, the space left),
not as a failed collective: the error a rank raises while writing its part (`DiskFull`) is not a RuntimeError, so
the round's `comm.naming_failures` lets it through, and the writing ranks report it through the checkpoint's own
gather, so that the server says it once (store/checkpoint.py).

HDF5 reports a full disk through h5py as an OSError or a RuntimeError (at a dataset's write, the file's creation, its
flush or its close) whose text carries the system's `errno = 28`; Python's own writes raise OSError(ENOSPC). The
h5py objects of a file whose close failed try to close again when they are collected and print "Exception ignored
in: 'h5py._objects.ObjectID.__dealloc__'" with a traceback each: `quiet_h5py_close` drops those reports."""
from __future__ import annotations

import contextlib
import errno
import gc
import shutil
import sys
from pathlib import Path

FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(Exception):
    """A write failed because the volume (or the user's quota) is full; the message names the path."""


def is_disk_full(exc: BaseException) -> bool:
    text = str(exc)
    return (getattr(exc, "errno", None) in FULL or f"errno = {errno.ENOSPC}," in text
            or "No space left on device" in text or "Disk quota exceeded" in text)


@contextlib.contextmanager
def quiet_h5py_close():
    """Around an HDF5 write and the collection after it: the h5py objects of a file that cannot be closed on a full
    disk report each failed close through sys.excepthook and sys.unraisablehook (Cython's full traceback, then
    "Exception ignored in: 'h5py._objects.ObjectID.__dealloc__'"); those reports, and only those, are dropped."""
    excepthook, unraisablehook = sys.excepthook, sys.unraisablehook

    def except_quietly(kind, value, tb):
        if not is_disk_full(value):
            excepthook(kind, value, tb)

    def unraisable_quietly(unraisable):
        if not is_disk_full(unraisable.exc_value):
            unraisablehook(unraisable)

    sys.excepthook, sys.unraisablehook = except_quietly, unraisable_quietly
    try:
        yield
    finally:
        gc.collect()
        sys.excepthook, sys.unraisablehook = excepthook, unraisablehook


def free_space(path: Path) -> str:
    """What is left on the volume holding `path`, for the message ('0 B free of 24 MiB')."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return "its free space unknown"
    return f"{_size(usage.free)} free of {_size(usage.total)}"


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""
