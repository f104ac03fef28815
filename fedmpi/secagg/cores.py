"""The node's cores for the protocol's vector work: a vector is cut into pieces of whole 64-byte ChaCha20 blocks,
each handled by a thread of one pool. PyCA's ChaCha20 and numpy's ufuncs release the GIL while they work on a
buffer, so the threads run in parallel; each piece touches only its own entries, so the result does not depend
on the number of threads."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

PIECE = 1 << 20          # entries a thread takes at a time (4 MB of uint32): enough pieces to balance 16 cores
_pool: ThreadPoolExecutor | None = None
_threads = len(os.sched_getaffinity(0))


def threads() -> int:
    return _threads


def set_threads(count: int) -> None:
    """Use `count` threads from now on (1: every piece on the calling thread)."""
    global _pool, _threads
    if count < 1:
        raise ValueError(f"threads must be at least 1, got {count}")
    if _pool is not None:
        _pool.shutdown()
        _pool = None
    _threads = count


def over_pieces(size: int, work: Callable[[int, int], None]) -> None:
    """work(start, stop) for consecutive pieces [start, stop) covering range(size), on the pool's threads; the
    pieces start at multiples of PIECE (a whole number of 64-byte blocks of 4- or 8-byte words)."""
    global _pool
    starts = range(0, size, PIECE)
    if _threads == 1 or len(starts) == 1:
        for s in starts:
            work(s, min(s + PIECE, size))
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(_threads, thread_name_prefix="secagg")
    for done in [_pool.submit(work, s, min(s + PIECE, size)) for s in starts]:
        done.result()
