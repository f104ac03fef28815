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


def over_pieces(size: int, work: Callable, before: Callable | None = None) -> list:
    """[work(start, stop)] for consecutive pieces [start, stop) covering range(size), on the pool's threads; the
    pieces start at multiples of PIECE (a whole number of 64-byte blocks of 4- or 8-byte words). With `before`,
    work(start, stop, before(start, stop)): `before` runs on the calling thread, piece by piece in order (a
    sequential random stream is read as with one thread) while the pool works on the pieces before."""
    global _pool
    pieces = [(s, min(s + PIECE, size)) for s in range(0, size, PIECE)]

    def args(a: int, b: int) -> tuple:
        return (a, b) if before is None else (a, b, before(a, b))

    if _threads == 1 or len(pieces) == 1:
        return [work(*args(a, b)) for a, b in pieces]
    if _pool is None:
        _pool = ThreadPoolExecutor(_threads, thread_name_prefix="secagg")
    return [done.result() for done in [_pool.submit(work, *args(a, b)) for a, b in pieces]]
