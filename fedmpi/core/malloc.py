"""glibc's malloc for a rank's training steps on CPU. With glibc's defaults the freed activation buffers of a step
(up to tens of MB each) stay in the heap: its mmap threshold grows to the largest chunk freed, and the heap keeps
what the next step cannot reuse (IR-18 at 112 px, batch 8: +790 MB over the model at the step's peak, against
+480 MB with a fixed 2 MB threshold; bench/malloc_step.py). A fixed threshold hands every large buffer back to the
kernel when it is freed; transparent huge pages for those mappings (glibc.malloc.hugetlb=1, glibc >= 2.35) keep
the page faults as few as with the defaults (a fixed threshold alone takes 5x as many, and ~10 % longer steps).
glibc reads its tunables when a process starts: `python -m fedmpi.run` therefore starts itself again once with
them, before torch or MPI start, where they pay: where the launch's memory check finds a node short of memory under
glibc's defaults (memory/check.py, short_under_glibc_defaults). Elsewhere they only cost time: every large buffer's
pages are faulted in and zeroed anew (a cross-device run of McMahan's CNN spends 14 % longer, with twice the system
CPU time; docs/PERFORMANCE.md). FEDMPI_MALLOC=tuned starts every launch with them, FEDMPI_MALLOC=default never;
a user's own GLIBC_TUNABLES malloc setting or MALLOC_* variable is kept as it is.

A cross-device rank on CPU (McMahan's CNN: a few hundred MB, memory never short) goes the other way, at run time:
glibc's defaults hand the top of the heap back after each step and fault it in again (about 7,000 page
faults a step of batch 64, 28 MB zeroed); keep_freed_buffers() fixes the mmap threshold at glibc's largest (32 MB,
above the step's 16.8 MB activations) and trims the heap only above 256 MB, so the next step reuses the pages
(about 200 faults a step; the step 4 % and a 10,000-image evaluation 15-20 % shorter; docs/PERFORMANCE.md).
"""
from __future__ import annotations

import ctypes
import os
import platform
import sys
from typing import Callable

TUNABLES = "glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=2097152"
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3        # mallopt's parameters (malloc.h)
KEEP = {M_MMAP_THRESHOLD: 32 * 1024 ** 2, M_TRIM_THRESHOLD: 256 * 1024 ** 2}


def users_own(env) -> bool:
    """Whether the user set glibc's malloc: a GLIBC_TUNABLES malloc setting or a MALLOC_* variable."""
    return "malloc" in env.get("GLIBC_TUNABLES", "") or any(key.startswith("MALLOC_") for key in env)


def on_glibc(libc: str | None = None) -> bool:
    """Whether this process's C library (or `libc`, as platform.libc_ver names it) is glibc."""
    return (libc if libc is not None else platform.libc_ver()[0]) == "glibc"


def tuned_environment(env: dict, libc: str | None = None, short: Callable[[], bool] = lambda: True) -> dict | None:
    """The environment to start again with, or None: already tuned, the user's own malloc settings, FEDMPI_MALLOC
    =default, a C library other than glibc, or (FEDMPI_MALLOC unset or auto) memory not `short()`."""
    mode = env.get("FEDMPI_MALLOC", "auto")
    if mode == "default":
        return None
    if users_own(env):
        return None
    if not on_glibc(libc):
        return None
    if mode != "tuned" and not short():
        return None
    return {**env, "GLIBC_TUNABLES": ":".join(t for t in (env.get("GLIBC_TUNABLES"), TUNABLES) if t)}


def running_tuned(env) -> bool:
    """Whether this process runs under the tuned settings."""
    return TUNABLES in env.get("GLIBC_TUNABLES", "")


def start_again_tuned(short: Callable[[], bool]) -> None:
    """Replace this process (same PID, same arguments: mpirun and srun keep tracking it) with one that runs under
    the tuned malloc where `short()` says memory is short (or FEDMPI_MALLOC=tuned); returns where nothing is to be
    done."""
    env = tuned_environment(dict(os.environ), short=short)
    if env is not None:
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def keep_freed_buffers(env=None, libc: str | None = None) -> bool:
    """Have glibc keep a CPU rank's freed step buffers for the next step (KEEP); whether it did. Nothing under
    FEDMPI_MALLOC=default or tuned, the tuned restart, the user's own malloc settings, or a C library other than glibc."""
    env = os.environ if env is None else env
    if env.get("FEDMPI_MALLOC", "auto") != "auto" or running_tuned(env) or users_own(env):
        return False
    if not on_glibc(libc):
        return False
    mallopt = ctypes.CDLL(None).mallopt
    return all(mallopt(parameter, value) == 1 for parameter, value in KEEP.items())
