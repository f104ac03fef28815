"""A sweep folder's index.json: what ran where — per run its job id, overrides, log path and state.

{"sweep": NAME, "created": ISO time, "folder": ..., "runs": [{"name", "config", "overrides", "labels",
 "world", "log_dir", "log", "job_id", "array_job", "submitit_folder", "tasks", "state", "exit_status",
 "error"}]}
Written to a temporary name and renamed, so a reader never sees half a file. The launchers (jobs/) write it, the
analysis reads it, both through this module: `read_index` is the one place the file is parsed.
"""
from __future__ import annotations

import datetime
import functools
import json
import os
from pathlib import Path

INDEX_NAME = "index.json"
# a run that ended with its result: it completed, or it stopped because its global model diverged (exit status 3,
# fedmpi.errors.EXIT_DIVERGED: a result of what it ran, which running it again would repeat)
ENDED = ("COMPLETED", "DIVERGED")
# entry keys that may name a run's log file or folder, tried in this order (indexes written by other tools too)
INDEX_PATH_KEYS = ("log", "log_path", "log_dir", "path", "run_dir", "dir", "folder")


class SweepIndexError(ValueError):
    """A sweep folder without a readable index; the message names the file."""


def new_index(sweep: str, folder: Path) -> dict:
    return {"sweep": sweep, "created": datetime.datetime.now().isoformat(timespec="seconds"),
            "folder": str(folder), "runs": []}


def write_index(folder: Path, index: dict) -> Path:
    path = Path(folder) / INDEX_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(index, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def ended(row: dict) -> bool:
    """Whether an index row's run ended with its result (ENDED): --resume keeps it, a sweep does not run it again."""
    return row.get("state") in ENDED


def read_index(folder: Path) -> dict:
    path = Path(folder) / INDEX_NAME
    if not path.is_file():
        raise SweepIndexError(f"{path}: no sweep index here")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SweepIndexError(f"{path}: not valid JSON ({exc})") from None


def logs_in_index(sweep: Path, log_name: str) -> dict[Path, dict]:
    """{resolved log path: entry} of a sweep folder's index ({} without one). Accepts {"runs": [...]}, a list of
    entries or {name: entry}; an entry names its run by one of INDEX_PATH_KEYS, a path that is absolute,
    relative to the sweep folder, or relative to where the sweep was started (a folder means its `log_name`)."""
    index = Path(sweep) / INDEX_NAME
    if not index.is_file():
        return {}
    stat = index.stat()
    return dict(_logs_in_index(index.resolve(), stat.st_mtime_ns, stat.st_size, log_name))


@functools.lru_cache(maxsize=64)
def _logs_in_index(index: Path, mtime_ns: int, size: int, log_name: str) -> tuple:
    sweep = index.parent
    data = read_index(sweep)
    if isinstance(data, dict):
        data = data.get("runs", data)
    if isinstance(data, dict):
        data = [dict(entry, name=name) if isinstance(entry, dict) else {} for name, entry in data.items()]
    if not isinstance(data, list):
        raise SweepIndexError(f"{index}: expected a list of runs or {{\"runs\": [...]}}")
    out = []
    for entry in data:
        if not isinstance(entry, dict):
            continue
        key = next((k for k in INDEX_PATH_KEYS if isinstance(entry.get(k), str)), None)
        if key is None:
            continue
        target = Path(entry[key])
        for place in ([target] if target.is_absolute() else [sweep / target, target]):
            log = place if place.suffix == ".h5" else place / log_name
            out.append((log.resolve(), entry))
    return tuple(out)
