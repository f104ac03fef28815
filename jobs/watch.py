"""Waiting for submitit jobs with a bound: every job ends as a result, a Slurm end state without a result
(FAILED, CANCELLED, TIMEOUT, NODE_FAIL, ...), LOST (Slurm never knew it or forgot it) or, past the deadline,
WAITING (still queued or running). States come from submitit's sacct watcher (one call for all jobs)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable

import submitit

# Slurm states after which a job runs no more (anything else may still produce a result).
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
         "REVOKED", "SPECIAL_EXIT")
RESULT_GRACE_S = 15.0      # an ended job's result files may show up a little later on a shared filesystem
UNKNOWN_GRACE_S = 60.0     # how long a submitted job may be unknown to sacct before it counts as lost


@dataclass
class Outcome:
    job_id: str
    state: str                       # COMPLETED with a result; else the Slurm end state, LOST or WAITING
    result: object | None = None     # task 0's return value (a jobs.task.RunResult)
    error: str = ""

    @property
    def finished(self) -> bool:
        return self.state not in ("WAITING",)

    @property
    def succeeded(self) -> bool:
        return self.result is not None and getattr(self.result, "exit_status", 0) == 0


def _base_state(state: str) -> str:
    return state.split()[0].upper() if state else "UNKNOWN"    # sacct says 'CANCELLED by 0'


def _results_ready(job: submitit.Job) -> bool:
    return all(job.task(i).paths.result_pickle.exists() for i in range(job.num_tasks))


def unsafe_folder(folder) -> str:
    """Why results in `folder` must not be unpickled ('' when it is private to this user): submitit's result
    files are pickles, and whoever can write them can run code in the process that reads them."""
    import os
    import stat

    info = os.stat(folder)
    if info.st_uid != os.getuid():
        return f"job folder {folder} belongs to uid {info.st_uid}, not to this user"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"job folder {folder} is writable by others (mode {stat.filemode(info.st_mode)}); make it private"
    return ""


def _collect(job: submitit.Job, state: str) -> Outcome:
    problem = unsafe_folder(job.paths.folder)
    if problem:  # its result pickle is not read
        return Outcome(job.job_id, "FAILED", error=f"refusing to read the result: {problem}")
    try:
        return Outcome(job.job_id, "COMPLETED", result=job.results()[0])
    except Exception as exc:  # noqa: BLE001 - a task raised: report it, do not crash the watcher
        return Outcome(job.job_id, "FAILED" if state in ("", "UNKNOWN", "COMPLETED") else state, error=str(exc))


def _tail(job: submitit.Job, lines: int = 20) -> str:
    try:
        text = job.stderr() or job.stdout() or ""
    except Exception:  # noqa: BLE001
        text = ""
    return "\n".join(text.splitlines()[-lines:])


def wait_for(jobs: Iterable[submitit.Job], timeout_s: float, poll_s: float = 2.0,
             on_change: Callable[[str, str], None] | None = None) -> dict[str, Outcome]:
    """Wait until every job has an outcome, at most `timeout_s`; `on_change(job_id, state)` on each new state."""
    pending = {job.job_id: job for job in jobs}
    outcomes: dict[str, Outcome] = {}
    seen: dict[str, str] = {}
    first_seen = {jid: time.monotonic() for jid in pending}
    ended_at: dict[str, float] = {}
    deadline = time.monotonic() + timeout_s
    while pending:
        watcher = next(iter(pending.values())).watcher
        watcher.update()    # one sacct call for all registered jobs
        now = time.monotonic()
        for jid, job in list(pending.items()):
            state = _base_state(watcher.get_state(jid, mode="cache"))
            if state != seen.get(jid):
                seen[jid] = state
                if on_change:
                    on_change(jid, state)
            if state != "UNKNOWN":
                first_seen[jid] = float("inf")    # known to Slurm: the unknown grace no longer applies
            if _results_ready(job):
                outcomes[jid] = _collect(job, state)
            elif state in ENDED:
                ended_at.setdefault(jid, now)
                if now - ended_at[jid] >= RESULT_GRACE_S or state != "COMPLETED":
                    outcomes[jid] = Outcome(jid, state if state != "COMPLETED" else "FAILED",
                                            error=f"job ended ({state}) without a result\n{_tail(job)}")
            elif state == "UNKNOWN" and now - first_seen[jid] >= UNKNOWN_GRACE_S:
                outcomes[jid] = Outcome(jid, "LOST", error=f"Slurm has no record of job {jid}")
            if jid in outcomes:
                del pending[jid]
        if not pending:
            break
        if time.monotonic() >= deadline:
            for jid in pending:
                outcomes[jid] = Outcome(jid, "WAITING", error=f"still {seen.get(jid, 'UNKNOWN')} after "
                                                              f"{timeout_s:.0f} s")
            break
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
    return outcomes
