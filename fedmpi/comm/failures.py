"""Failure discipline: a backend failure becomes one line naming what was going on, and any exception on a rank
prints `rank R (role): message` and aborts the whole MPI job, so that no rank is left waiting in a collective."""
from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from typing import Callable

from fedmpi.comm import heartbeat
from fedmpi.comm.control import CommFailure, CommTimeout
from fedmpi.comm.rendezvous import collective_timeout_s, mpi_comm


@contextlib.contextmanager
def naming_failures(what: str):
    """Around torch.distributed calls (and calls that make them): a failure or a timeout of the backend becomes
    one line that says what was going on (`what`, e.g. the round or the group and its ranks); nested uses add
    to the line from the outside in: 'round 4: gather of theta_i over group leaders (ranks 0, 1, 3): ...'."""
    try:
        yield
    except CommTimeout as exc:
        raise CommTimeout(f"{what}: {exc}") from None
    except RuntimeError as exc:  # gloo and NCCL failures (DistBackendError is one)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if type(exc).__name__ == "OutOfMemoryError":    # this rank's own failure, not a peer's silence
            raise DeviceOutOfMemory(f"{what}: {first}") from None
        if "timed out" in first.lower() or "timeout" in first.lower():
            raise CommTimeout(f"{what}: no answer within run.collective_timeout_s={collective_timeout_s():g} s "
                              f"({first})") from None
        raise CommFailure(f"{what}: {first}") from None


class DeviceOutOfMemory(RuntimeError):
    """The device ran out of memory on this rank (torch.OutOfMemoryError), named with what was going on."""


SECONDARY_GRACE_S = 3.0
OUTPUT_GRACE_S = 0.5


def run_guarded(role: str, fn: Callable[[], int | None], on_failure: Callable[[], None] | None = None) -> int:
    """Run one rank's work; any exception prints `rank R (role): message` and aborts the whole MPI job
    (`on_failure` runs first, after the message: it undoes what a failed start left behind)."""
    comm = mpi_comm()
    try:
        code = fn()
        return int(code or 0)
    except SystemExit as exc:  # a deliberate exit with a message (e.g. a config error found on one rank)
        if exc.code in (0, None):
            return 0
        message = exc.code if isinstance(exc.code, str) else f"exit status {exc.code}"
        _abort(comm, role, message, on_failure, getattr(exc, "status", 1))
    except BaseException as exc:  # noqa: BLE001 - every failure must abort the job, never hang it
        if os.environ.get("FEDMPI_TRACEBACK"):
            traceback.print_exc()
        if isinstance(exc, CommFailure):  # most often the echo of another rank's failure: let that one speak
            time.sleep(SECONDARY_GRACE_S)  # first; the job usually ends before this line is printed at all
        message = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, (CommTimeout, CommFailure)):
            silent = heartbeat.silent_ranks()   # who is missing: a timeout of the backend does not say
            if silent:
                message += f"; stopped answering: {silent}"
        _abort(comm, role, message, on_failure)
    return 1


def _abort(comm, role: str, message: str, on_failure: Callable[[], None] | None = None, status: int = 1) -> None:
    sys.stderr.write(f"rank {comm.Get_rank()} ({role}): {message}\n")
    sys.stderr.flush()
    sys.stdout.flush()
    time.sleep(OUTPUT_GRACE_S)  # mpirun forwards the line before the abort tears the job down
    if on_failure is not None:
        try:
            on_failure()
        except Exception:  # noqa: BLE001 - the abort below matters more than a clean-up
            pass
    comm.Abort(status)   # mpirun exits with it (fedmpi.errors.EXIT_DIVERGED for a diverged run)
