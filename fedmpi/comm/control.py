"""Control messages with a deadline, on mpi4py: a receive that naps between polls (Iprobe, then a sleep that
doubles up to MAX_NAP_S), and gather / bcast / barrier / allreduce_max for small control data, each ending with
`CommTimeout` (one line: what was awaited, the ranks, the timeout) instead of waiting for ever. Re-exported by
`fedmpi.comm`. No torch here."""
from __future__ import annotations

import time
from typing import Callable, Iterable

from fedmpi.comm.tags import BCAST as TAG_BCAST, GATHER as TAG_GATHER


def _world():
    from mpi4py import MPI

    return MPI.COMM_WORLD

# An idle rank polls with naps that double up to MAX_NAP_S: a few dozen wake-ups a second, well under 1 % of a
# core, and at most MAX_NAP_S of added latency per control message.
MIN_NAP_S, MAX_NAP_S = 1e-4, 0.02


class CommTimeout(RuntimeError):
    """A rank did not answer within the run's collective timeout (run.collective_timeout_s)."""


class CommFailure(RuntimeError):
    """A torch.distributed operation failed (most often: another rank ended)."""


class Backoff:
    """Naps between polls that double from MIN_NAP_S up to MAX_NAP_S; reset() when something arrived."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.seconds = MIN_NAP_S

    def nap(self) -> None:
        time.sleep(self.seconds)
        self.seconds = min(2 * self.seconds, MAX_NAP_S)

    def after(self, moved: bool) -> None:
        """After one poll: start again from the shortest nap if it found something, else nap."""
        if moved:
            self.reset()
        else:
            self.nap()


def _wait_until(done: Callable[[], bool], deadline: float | None) -> bool:
    """Poll done() with backing-off naps until it is true (True) or the deadline passes (False)."""
    backoff = Backoff()
    while not done():
        if deadline is not None and time.monotonic() >= deadline:
            return False
        backoff.nap()
    return True


def _deadline(timeout_s: float | None) -> float | None:
    return None if timeout_s is None else time.monotonic() + timeout_s


def _world_ranks(comm, ranks: Iterable[int]) -> list[int]:
    """Ranks of `comm` as COMM_WORLD ranks (what error messages name)."""
    from mpi4py import MPI

    ranks = list(ranks)
    if comm == MPI.COMM_WORLD or not ranks:
        return ranks
    return list(MPI.Group.Translate_ranks(comm.Get_group(), ranks, MPI.COMM_WORLD.Get_group()))


def _rank_list(ranks: list[int]) -> str:
    from fedmpi.comm.nodes import describe_ranks

    return describe_ranks(ranks)


def receive(source: int, tag: int, *, what: str, timeout_s: float | None, comm=None):
    """The next control message from `source` (MPI.ANY_SOURCE: any rank) with `tag`, waiting at most
    `timeout_s` (None: for ever) without spinning; CommTimeout naming what was awaited otherwise."""
    from mpi4py import MPI

    comm = comm or _world()
    status = MPI.Status()
    if not _wait_until(lambda: comm.Iprobe(source=source, tag=tag, status=status), _deadline(timeout_s)):
        sender = "any rank" if source == MPI.ANY_SOURCE else _rank_list(_world_ranks(comm, [source]))
        raise CommTimeout(f"no {what} from {sender} within {timeout_s:g} s")
    return comm.recv(source=status.Get_source(), tag=tag)


def _send(comm, value, dest: int, tag: int, what: str, deadline: float | None, timeout_s) -> None:
    request = comm.isend(value, dest=dest, tag=tag)
    if not _wait_until(lambda: request.Test(), deadline):
        raise CommTimeout(f"{what}: {_rank_list(_world_ranks(comm, [dest]))} did not take the message within "
                          f"{timeout_s:g} s")


def send(value, dest: int, tag: int, *, what: str, timeout_s: float | None, comm=None) -> None:
    """One small control message to `dest` with `tag`, CommTimeout when it is not taken within `timeout_s`."""
    _send(comm or _world(), value, dest, tag, what, _deadline(timeout_s), timeout_s)


def gather(value, *, what: str, timeout_s: float | None, comm, root: int = 0) -> list | None:
    """comm.gather(value, root) with a deadline: on the root, the list of every rank's value; CommTimeout
    naming the ranks that did not answer."""
    deadline = _deadline(timeout_s)
    rank = comm.Get_rank()
    if rank != root:
        _send(comm, value, root, TAG_GATHER, what, deadline, timeout_s)
        return None
    values: dict[int, object] = {root: value}
    others = [r for r in range(comm.Get_size()) if r != root]

    def all_in() -> bool:
        for r in others:
            if r not in values and comm.Iprobe(source=r, tag=TAG_GATHER):
                values[r] = comm.recv(source=r, tag=TAG_GATHER)
        return len(values) == comm.Get_size()

    if not _wait_until(all_in, deadline):
        missing = _world_ranks(comm, [r for r in others if r not in values])
        raise CommTimeout(f"{what}: no answer from {_rank_list(missing)} within {timeout_s:g} s")
    return [values[r] for r in range(comm.Get_size())]


def bcast(value, *, what: str, timeout_s: float | None, comm, root: int = 0):
    """comm.bcast(value, root) with a deadline on every rank."""
    deadline = _deadline(timeout_s)
    if comm.Get_rank() != root:
        return receive(root, TAG_BCAST, what=what, timeout_s=timeout_s, comm=comm)
    for r in range(comm.Get_size()):
        if r != root:
            _send(comm, value, r, TAG_BCAST, what, deadline, timeout_s)
    return value


def barrier(*, what: str, timeout_s: float | None, comm=None) -> None:
    """comm.Barrier() with a deadline (a non-blocking barrier, polled)."""
    comm = comm or _world()
    request = comm.Ibarrier()
    if not _wait_until(lambda: request.Test(), _deadline(timeout_s)):
        raise CommTimeout(f"{what}: not every rank of the {comm.Get_size()} arrived within {timeout_s:g} s")


def allreduce_max(value: int, *, what: str, timeout_s: float | None, comm) -> int:
    """The largest of every rank's integer, with a deadline (a non-blocking allreduce, polled)."""
    import numpy as np
    from mpi4py import MPI

    mine, out = np.array([value], dtype=np.int64), np.zeros(1, dtype=np.int64)
    request = comm.Iallreduce(mine, out, op=MPI.MAX)
    if not _wait_until(lambda: request.Test(), _deadline(timeout_s)):
        raise CommTimeout(f"{what}: not every rank of the {comm.Get_size()} joined within {timeout_s:g} s")
    return int(out[0])
