"""Preemption: SIGTERM or SIGUSR1 on any rank asks the run to checkpoint and stop at the next round boundary.

The handler only sets a flag. Once per round every rank of the federation (server and trainers) joins one
allreduce of that flag, so all of them decide together to checkpoint and exit with EXIT_PREEMPTED, which the
Slurm scripts and the submitit task requeue on.

Under Open MPI's mpirun, send SIGUSR1 to mpirun: it forwards it to every rank. SIGTERM sent to mpirun itself
makes mpirun kill the job within a second (its own behaviour, not configurable); the last complete checkpoint
and the run log stay as they were. Slurm's scancel and --signal=USR1 reach the ranks directly (srun) or
through the batch script (slurm/lib.sh forwards them), so both signals work there.
"""
from __future__ import annotations

import signal
import threading

EXIT_PREEMPTED = 75
PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

_received: list[int] = []


def _on_signal(signum, frame) -> None:
    _received.append(signum)


def install() -> None:
    """Route SIGTERM and SIGUSR1 of this process to the preemption flag (main thread only; idempotent)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in PREEMPTION_SIGNALS:
        signal.signal(signum, _on_signal)
        signal.siginterrupt(signum, False)  # system calls in progress (MPI, gloo, I/O) resume, not fail


def ignore() -> None:
    """Ignore preemption signals from now on, once this rank's work is done. The first rank to exit with 75
    makes srun (--kill-on-bad-exit) or mpirun terminate the others; ignoring SIGTERM lets those finish their
    own exit (Python's shutdown would otherwise restore the default action, death by signal, which srun
    reports as 143 instead of 75)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in PREEMPTION_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def requested() -> bool:
    """Whether this process has received a preemption signal."""
    return bool(_received)


def agree(comm) -> str:
    """On every rank of `comm`: the name of a preemption signal any of them received ('' when none).
    Collective: all ranks must call it; bounded by the run's collective timeout."""
    from fedmpi import comm as mpicomm

    signum = mpicomm.allreduce_max(_received[0] if _received else 0, what="preemption agreement (allreduce over "
                                   "server + trainers)", timeout_s=mpicomm.collective_timeout_s(), comm=comm)
    return signal.Signals(signum).name if signum else ""
