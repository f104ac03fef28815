"""A run's lineage: the history it continues. A resume from an earlier checkpoint (a rewind), or a fresh start in
a folder that holds checkpoints, abandons the checkpoints after that point: they are moved aside into
`<checkpoint.dir>/abandoned-N/` (so `--resume auto` and pruning only ever see the current history), and the run
log's rows of the abandoned rounds are kept in a copy `log.abandoned-N.h5` before the log is cut back. A
`--resume auto` that finds nothing to continue keeps an earlier attempt's log as `log.attempt-N.h5`: a requeued
job never erases its history."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

from fedmpi.store.h5log import open_log
from fedmpi.store.manifest import MANIFEST, ResumeError, list_checkpoints


def _free_name(folder: Path, stem: str, suffix: str = "") -> Path:
    k = 1
    while (folder / f"{stem}{k}{suffix}").exists():
        k += 1
    return folder / f"{stem}{k}{suffix}"


def set_aside_future(directory: Path, rounds_done: int, say: Callable[[str], None]) -> Path | None:
    """Move the complete checkpoints after `rounds_done` into a new `abandoned-N/` folder; returns that folder
    (None when there were none)."""
    later = [folder for r, folder in list_checkpoints(directory) if r > rounds_done
             and (folder / MANIFEST).is_file()]
    if not later:
        return None
    target = _free_name(Path(directory), "abandoned-")
    target.mkdir()
    for folder in later:
        os.replace(folder, target / folder.name)
    say(f"continuing after round {rounds_done}: the {len(later)} later checkpoint(s) of the abandoned history "
        f"({', '.join(f.name for f in later)}) moved to {target}")
    return target


def keep_log_copy(log: Path, abandoned: Path, say: Callable[[str], None]) -> None:
    """Copy the run log before a rewind cuts its later rows: `log.<abandoned-N>.h5`, next to it."""
    if not log.exists():
        return
    copy = log.with_name(f"log.{abandoned.name}.h5")
    shutil.copyfile(log, copy)
    say(f"the run log as it was (with the abandoned rounds) copied to {copy}")


def rounds_logged(log: Path) -> int | None:
    """Rows in the log's rounds table; None when the file cannot be read as a run log."""
    try:
        with open_log(log) as f:
            return int(f["rounds/round"].shape[0])
    except (OSError, KeyError):
        return None


def keep_earlier_log(log: Path, rounds: int, reason: str, say: Callable[[str], None]) -> None:
    """Before a run starts over in a folder that holds a log: a finished run's log refuses the start (nothing to
    resume), any other is renamed `log.attempt-N.h5`."""
    if not log.exists():
        return
    done = rounds_logged(log)
    if done is not None and done >= rounds:
        raise ResumeError(f"{reason}, and {log} holds the finished run ({done}/{rounds} rounds); nothing to "
                          f"resume, the log was left as it is (choose another log.name to train again)")
    kept = _free_name(log.parent, "log.attempt-", ".h5")
    os.replace(log, kept)
    say(f"{reason}: starting from round 1; the earlier attempt's log ({done if done is not None else 'unreadable'}"
        f" rounds) kept as {kept}")
