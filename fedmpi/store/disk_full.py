"""A checkpoint write that fails because its volume is full is named as such (the checkpoint folder, the space left),
not as a failed collective: the error a rank raises while writing its part (`DiskFull`) is not a RuntimeError, so
the round's `comm.naming_failures` lets it through, and the writing ranks report it through the checkpoint's own
gather, so that the server says it once (store/checkpoint.py).

A part is built in memory and written by Python (store/manifest.py), so a full volume raises OSError(ENOSPC); HDF5
itself reports one as an OSError or a RuntimeError whose text carries the system's `errno = 28`, and
`is_disk_full` knows both."""
from __future__ import annotations

import errno
import shutil
from pathlib import Path

FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(Exception):
    """A write failed because the volume (or the user's quota) is full; the message names the path."""


def is_disk_full(exc: BaseException) -> bool:
    text = str(exc)
    return (getattr(exc, "errno", None) in FULL or f"errno = {errno.ENOSPC}," in text
            or "No space left on device" in text or "Disk quota exceeded" in text)


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
