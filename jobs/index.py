"""A sweep folder's index.json: what ran where — per run its job id, overrides, log path and state.

{"sweep": NAME, "created": ISO time, "folder": ..., "runs": [{"name", "config", "overrides", "labels",
 "world", "log_dir", "log", "job_id", "array_job", "submitit_folder", "tasks", "state", "exit_status",
 "error"}]}
Written to a temporary name and renamed, so a reader never sees half a file.
"""
from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

INDEX_NAME = "index.json"


def new_index(sweep: str, folder: Path) -> dict:
    return {"sweep": sweep, "created": datetime.datetime.now().isoformat(timespec="seconds"),
            "folder": str(folder), "runs": []}


def write_index(folder: Path, index: dict) -> Path:
    path = Path(folder) / INDEX_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(index, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def read_index(folder: Path) -> dict:
    path = Path(folder) / INDEX_NAME
    if not path.is_file():
        raise ValueError(f"{path}: no sweep index here")
    return json.loads(path.read_text())
