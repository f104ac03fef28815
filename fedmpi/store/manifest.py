"""Checkpoint folders: parts written atomically, the manifest that makes a folder whole, finding and pruning.

Every part is written under a temporary name, fsynced and renamed; the server writes `manifest.json` (size and
sha256 of every part) last. A folder without a manifest, or whose parts do not match it, is never resumed from.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import h5py
import numpy as np

from fedmpi.store.disk_full import DiskFull, free_space, is_disk_full
from fedmpi.store.errors import ResumeError
from fedmpi.store.tree import read_tree, write_tree

FORMAT = "fedmpi-checkpoint"
VERSION = 1
MANIFEST = "manifest.json"
SERVER_PART = "server.h5"
ROUND_FOLDER = re.compile(r"^round_(\d+)$")


def round_folder_name(rounds_done: int) -> str:
    return f"round_{rounds_done:06d}"


def party_part(party: str, index: int) -> str:
    return f"party-{party}-{index}.h5"


@dataclass(frozen=True)
class Part:
    name: str
    size: int
    sha256: str
    rank: int
    node: str = ""      # the host that wrote it (on a cluster: each silo's part on its own node)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_part(folder: Path, name: str, tree: dict, attrs: dict, rank: int) -> Part:
    """Write one part under a temporary name, fsync, rename; returns its size and sha256 for the manifest."""
    final = folder / name
    tmp = folder / f".{name}.tmp-{os.getpid()}"
    image = _h5_image(tree, attrs)
    try:
        with open(tmp, "wb") as out:
            out.write(image)
        _fsync(tmp)
        os.replace(tmp, final)
        _fsync(folder)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        tmp.unlink(missing_ok=True)
        raise DiskFull(f"{final}: no space left on the device ({free_space(folder)})") from None
    return Part(name, len(image), hashlib.sha256(image).hexdigest(), rank, socket.gethostname())


def _h5_image(tree: dict, attrs: dict) -> bytes:
    """The part's HDF5 file, built in memory: the disk is then written by Python alone, so that a full volume is an
    OSError(ENOSPC) and never a failed HDF5 flush, whose open objects can crash the rank when they are closed."""
    with h5py.File(f"part-{os.getpid()}", "w", driver="core", backing_store=False, track_order=True) as f:
        f.attrs.update({"format": FORMAT, "version": VERSION, **attrs})
        for key, value in tree.items():
            write_tree(f, key, value)
        f.flush()
        return f.id.get_file_image()


def read_part(path: Path, keys: tuple[str, ...] | None = None) -> dict:
    """The tree of one part (only `keys` when given); the root attributes under '_attrs'."""
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != FORMAT:
                raise ResumeError(f"{path}: not a fedmpi checkpoint part")
            out = {key: read_tree(f[key]) for key in (keys if keys is not None else f.keys()) if key in f}
            out["_attrs"] = {key: (value.item() if isinstance(value, np.generic) else value)
                             for key, value in f.attrs.items()}
            return out
    except OSError as exc:
        raise ResumeError(f"{path}: cannot read the checkpoint part ({exc})") from None


# ---------------------------------------------------------------- folders and manifests


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """(rounds done, folder) of every round_NNNNNN folder, oldest first, complete or not."""
    if not Path(directory).is_dir():
        return []
    found = []
    for path in Path(directory).iterdir():
        match = ROUND_FOLDER.match(path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))
    return sorted(found)


def read_manifest(folder: Path) -> dict:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise ResumeError(f"{folder}: no {MANIFEST} (the checkpoint was never completed)")
    try:
        manifest = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError):
        raise ResumeError(f"{path}: not valid JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ResumeError(f"{path}: not a fedmpi checkpoint manifest")
    if manifest.get("version") != VERSION:
        raise ResumeError(f"{path}: checkpoint format version {manifest.get('version')}, this fedmpi reads "
                          f"version {VERSION}")
    parts = manifest.get("parts")
    well_formed = (isinstance(manifest.get("round"), int) and isinstance(manifest.get("step"), int)
                   and isinstance(parts, dict)
                   and all(isinstance(info, dict) and isinstance(info.get("size"), int)
                           and isinstance(info.get("sha256"), str) and "/" not in name
                           for name, info in parts.items()))
    if not well_formed:
        raise ResumeError(f"{path}: a manifest needs round, step and parts {{name: {{size, sha256}}}}")
    return manifest


def check_complete(folder: Path) -> dict:
    """The manifest of a complete checkpoint (every part there, of its size and sha256); ResumeError naming
    the first problem otherwise."""
    manifest = read_manifest(folder)
    parts = manifest["parts"]
    if SERVER_PART not in parts:
        raise ResumeError(f"{folder}: the manifest lists no {SERVER_PART}")
    for name, info in parts.items():
        path = Path(folder) / name
        if not path.is_file():
            raise ResumeError(f"{folder}: part {name} is missing")
        size = path.stat().st_size
        if size != info["size"]:
            raise ResumeError(f"{folder}: part {name} has {size} bytes, the manifest says {info['size']} "
                              "(truncated or rewritten)")
        if _sha256(path) != info["sha256"]:
            raise ResumeError(f"{folder}: part {name} does not match the sha256 in the manifest")
    return manifest


def latest_complete(directory: Path, report: Callable[[str], None] | None = None) -> Path | None:
    """The newest complete checkpoint under `directory` (incomplete or damaged ones are skipped)."""
    for _, folder in reversed(list_checkpoints(directory)):
        try:
            check_complete(folder)
            return folder
        except ResumeError as exc:
            if report:
                report(f"skipping checkpoint {exc}")
    return None


def resolve_checkpoint(path: Path, report: Callable[[str], None] | None = None) -> Path:
    """A checkpoint folder from a path naming it, or the newest complete one in a ckpt or run folder."""
    path = Path(path)
    if not path.exists():
        raise ResumeError(f"{path}: no such checkpoint folder")
    if not path.is_dir():
        raise ResumeError(f"{path}: not a folder (give a checkpoint folder such as ckpt/round_000012)")
    if ROUND_FOLDER.match(path.name) or (path / MANIFEST).exists():
        check_complete(path)
        return path
    for directory in (path, path / "ckpt"):
        found = latest_complete(directory, report)
        if found is not None:
            return found
    raise ResumeError(f"{path}: holds no complete checkpoint")


def write_manifest(folder: Path, rounds_done: int, step: int, parts: list[Part], meta: dict) -> None:
    manifest = {"format": FORMAT, "version": VERSION, "round": rounds_done, "step": step, **meta,
                "created": datetime.datetime.now().isoformat(timespec="seconds"),
                "parts": {p.name: {"size": p.size, "sha256": p.sha256, "rank": p.rank, "node": p.node}
                          for p in sorted(parts, key=lambda p: p.rank)}}
    tmp = folder / f".{MANIFEST}.tmp"
    try:
        tmp.write_text(json.dumps(manifest, indent=1) + "\n")
        _fsync(tmp)
        os.replace(tmp, folder / MANIFEST)
        _fsync(folder)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        tmp.unlink(missing_ok=True)
        raise DiskFull(f"{folder / MANIFEST}: no space left on the device ({free_space(folder)})") from None


def remove_checkpoint(folder: Path) -> None:
    """Manifest first, so that a folder half removed is never taken for a complete checkpoint."""
    (folder / MANIFEST).unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=True)


def prune(directory: Path, keep: int, written: Path | None = None) -> list[Path]:
    """Keep the `keep` newest complete checkpoints (and `written`, the one just written, whatever its round);
    drop older ones and incomplete leftovers older than those."""
    checkpoints = list_checkpoints(directory)
    complete = [(rounds_done, folder) for rounds_done, folder in checkpoints if (folder / MANIFEST).is_file()]
    if not complete:
        return []
    kept = {folder for _, folder in complete[-keep:]} | {written}
    newest = complete[-1][0]
    removed = []
    for rounds_done, folder in checkpoints:
        if folder not in kept and ((folder / MANIFEST).is_file() or rounds_done < newest):
            remove_checkpoint(folder)
            removed.append(folder)
    return removed
