"""Checkpoints: one folder per checkpoint, one HDF5 part per writing rank, and a manifest that makes it whole.

Layout of `<checkpoint.dir>/round_000012/` (12 = rounds completed; the run resumes at round index 12):
  server.h5             written by the server: /theta (flat Θ), /algorithm (the rule's server state, e.g.
                        FedAvgM's v), /w, /validation (FV state, when there is one), /rng, /config (YAML)
  party-<name>-<k>.h5   written by rank k of party <name>: /classifier (its shard), /classifier_optimizer
                        (momentum buffers), /precision, /rng; the leader (k = 0) also /algorithm (the rule's
                        trainer state: PFM's M, local momentum), which every rank of the party reads back
  manifest.json         written by the server last, after every part is on disk: each part's size and sha256
Every part is written under a temporary name, fsynced and renamed; a folder without a manifest, or whose
parts do not match it, is never resumed from. Root attributes of every part: format, version, round, step.

Values are stored as a tree (`write_tree` / `read_tree`): dicts are groups, tensors and arrays datasets,
strings string datasets, other plain values JSON, so any state_dict of tensors round-trips exactly.

torch is imported only where tensors are handled: choosing and checking a checkpoint for `--resume` does
not load it, so that a refused launch ends at once.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import random
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import h5py
import numpy as np

from fedmpi.config import ConfigError

FORMAT = "fedmpi-checkpoint"
VERSION = 1
MANIFEST = "manifest.json"
SERVER_PART = "server.h5"
ROUND_FOLDER = re.compile(r"^round_(\d+)$")


class ResumeError(ConfigError):
    """A checkpoint that cannot be resumed from (missing, incomplete, or written by another kind of run)."""


def round_folder_name(rounds_done: int) -> str:
    return f"round_{rounds_done:06d}"


def party_part(party: str, index: int) -> str:
    return f"party-{party}-{index}.h5"


def checkpoint_dir(cfg, run_dir: Path) -> Path:
    return Path(cfg.checkpoint.dir) if cfg.checkpoint.dir else Path(run_dir) / "ckpt"


# ---------------------------------------------------------------- values <-> HDF5


def _is_plain(value) -> bool:
    """JSON-able without loss: scalars and lists of them (tuples and dicts get their own groups)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, list) and all(_is_plain(v) for v in value)


def write_tree(group: h5py.Group, name: str, value) -> None:
    """Store `value` under group[name]: dict -> group, tensor/array -> dataset, str, bytes, or JSON."""
    import torch

    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, torch.Tensor):
        t = value.detach().to("cpu").contiguous()
        dtype = str(t.dtype).removeprefix("torch.")
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        item = group.create_dataset(name, data=t.numpy())
        item.attrs.update(kind="tensor", dtype=dtype)
    elif isinstance(value, np.ndarray):
        item = group.create_dataset(name, data=value)
        item.attrs["kind"] = "ndarray"
    elif isinstance(value, bytes):
        item = group.create_dataset(name, data=np.frombuffer(value, dtype=np.uint8))
        item.attrs["kind"] = "bytes"
    elif isinstance(value, str):
        item = group.create_dataset(name, data=value, dtype=h5py.string_dtype())
        item.attrs["kind"] = "str"
    elif isinstance(value, dict):
        item = group.create_group(name, track_order=True)
        int_keys = []
        for key, member in value.items():
            if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
                key = str(int(key))
                int_keys.append(key)
            elif not isinstance(key, str) or not key or "/" in key or key == ".":
                raise TypeError(f"checkpoint: cannot store the dict key {key!r} under {item.name}")
            write_tree(item, key, member)
        item.attrs.update(kind="dict", int_keys=json.dumps(int_keys))
    elif isinstance(value, (list, tuple)) and not (isinstance(value, list) and _is_plain(value)):
        item = group.create_group(name, track_order=True)
        for i, member in enumerate(value):
            write_tree(item, str(i), member)
        item.attrs.update(kind="tuple" if isinstance(value, tuple) else "list", length=len(value))
    elif _is_plain(value):
        item = group.create_dataset(name, data=json.dumps(value), dtype=h5py.string_dtype())
        item.attrs["kind"] = "json"
    else:
        raise TypeError(f"checkpoint: cannot store a {type(value).__name__} under {group.name}/{name}")


def read_tree(item):
    """The value `write_tree` stored at this group or dataset."""
    import torch

    kind = item.attrs.get("kind")
    if kind == "tensor":
        dtype = getattr(torch, item.attrs["dtype"])
        t = torch.from_numpy(np.array(item[()]))
        return t.view(torch.bfloat16) if dtype == torch.bfloat16 else t.to(dtype)
    if kind == "ndarray":
        return np.array(item[()])
    if kind == "bytes":
        return np.array(item[()], dtype=np.uint8).tobytes()
    if kind == "str":
        return item.asstr()[()]
    if kind == "json":
        return json.loads(item.asstr()[()])
    if kind == "dict":
        int_keys = set(json.loads(item.attrs["int_keys"]))
        return {int(key) if key in int_keys else key: read_tree(member) for key, member in item.items()}
    if kind in ("list", "tuple"):
        members = [read_tree(item[str(i)]) for i in range(int(item.attrs["length"]))]
        return tuple(members) if kind == "tuple" else members
    raise ValueError(f"{item.file.filename}: {item.name} is not a checkpoint value (kind {kind!r})")


def copy_into(targets: list[torch.Tensor] | dict, saved, what: str) -> None:
    """Copy saved tensors into existing ones in place (same structure), naming the first mismatch."""
    import torch

    if isinstance(targets, dict):
        if set(targets) != set(saved):
            raise ResumeError(f"checkpoint: {what} holds {sorted(saved)}, this run has {sorted(targets)}")
        for key in targets:
            copy_into(targets[key], saved[key], f"{what}/{key}")
    elif isinstance(targets, (list, tuple)):
        if len(targets) != len(saved):
            raise ResumeError(f"checkpoint: {what} has {len(saved)} tensors, this run has {len(targets)}")
        for i, (target, value) in enumerate(zip(targets, saved)):
            copy_into(target, value, f"{what}[{i}]")
    else:
        if targets.shape != saved.shape or targets.dtype != saved.dtype:
            raise ResumeError(f"checkpoint: {what} is {saved.dtype} {list(saved.shape)}, this run has "
                              f"{targets.dtype} {list(targets.shape)}")
        with torch.no_grad():
            targets.copy_(saved)


# ---------------------------------------------------------------- random number generators


def capture_rng() -> dict:
    """The global generators of this process: torch (and CUDA), numpy's legacy one, Python's `random`."""
    import torch

    version, words, gauss = random.getstate()
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
             "python": {"version": version, "state": np.array(words, dtype=np.int64), "gauss_next": gauss}}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    py = state["python"]
    random.setstate((py["version"], tuple(int(x) for x in py["state"]), py["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def configure_determinism(cfg) -> None:
    """run.deterministic: deterministic kernels and fixed seeds (with data.workers=0 a CPU run is bitwise
    reproducible, and so is a run stopped and resumed)."""
    if not cfg.run.deterministic:
        return
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    random.seed(cfg.run.seed)
    np.random.seed(cfg.run.seed)
    torch.manual_seed(cfg.run.seed)


# ---------------------------------------------------------------- parts


@dataclass(frozen=True)
class Part:
    name: str
    size: int
    sha256: str
    rank: int


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
    with h5py.File(tmp, "w", track_order=True) as f:
        f.attrs.update({"format": FORMAT, "version": VERSION, **attrs})
        for key, value in tree.items():
            write_tree(f, key, value)
    _fsync(tmp)
    size, digest = tmp.stat().st_size, _sha256(tmp)
    os.replace(tmp, final)
    _fsync(folder)
    return Part(name, size, digest, rank)


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
                "parts": {p.name: {"size": p.size, "sha256": p.sha256, "rank": p.rank}
                          for p in sorted(parts, key=lambda p: p.rank)}}
    tmp = folder / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    _fsync(tmp)
    os.replace(tmp, folder / MANIFEST)
    _fsync(folder)


def remove_checkpoint(folder: Path) -> None:
    """Manifest first, so that a folder half removed is never taken for a complete checkpoint."""
    (folder / MANIFEST).unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=True)


def prune(directory: Path, keep: int) -> list[Path]:
    """Keep the `keep` newest complete checkpoints; drop older ones and incomplete leftovers older than those."""
    checkpoints = list_checkpoints(directory)
    complete = [(rounds_done, folder) for rounds_done, folder in checkpoints if (folder / MANIFEST).is_file()]
    if not complete:
        return []
    kept = {folder for _, folder in complete[-keep:]}
    newest = complete[-1][0]
    removed = []
    for rounds_done, folder in checkpoints:
        if folder not in kept and ((folder / MANIFEST).is_file() or rounds_done < newest):
            remove_checkpoint(folder)
            removed.append(folder)
    return removed


# ---------------------------------------------------------------- what a resume must match


SIGNATURE_LABELS = {"topology": "topology", "algorithm": "fed.algorithm", "K": "fed.K", "model": "model",
                    "classifier": "model.classifier"}


def run_signature(cfg, layout) -> dict:
    """What a checkpoint's state depends on; a resume with any of these changed is refused. (Validators hold
    no state: their number may change.)"""
    m = cfg.model
    from fedmpi.algorithms.registry import method_key
    algorithm = method_key(cfg.fed.algorithm, cfg.fed.setting) + (f" ({cfg.fed.solo_party})" if cfg.fed.solo_party else "")
    topology = " + ".join(["1 server", *(f"{p.name} {len(p.ranks)}" for p in layout.parties)])
    return {"topology": topology, "algorithm": algorithm, "K": cfg.fed.K,
            "model": f"{m.backbone} width {m.width} embedding {m.embedding_size} input {cfg.data.image_size} "
                     f"{cfg.run.dtype}",
            "classifier": m.classifier}


def check_compatible(folder: Path, manifest: dict, cfg, layout) -> None:
    saved = manifest.get("signature", {})
    for key, current in run_signature(cfg, layout).items():
        if saved.get(key) != current:
            label = SIGNATURE_LABELS[key]
            raise ResumeError(f"--resume: {folder} was written by a run with {label} {saved.get(key)!r}, this "
                              f"run has {label} {current!r}; a run resumes only with the same {label}")


# ---------------------------------------------------------------- the run log after a crash


def release_log(path: Path) -> None:
    """A server killed with the log open leaves HDF5's 'file is open for writing' mark in it, which refuses
    any later writer; such a log is copied (it reads fine in SWMR mode) into a clean file of the same content."""
    path = Path(path)
    if not path.exists():
        return
    try:
        h5py.File(path, "r+", libver="latest").close()
        return
    except OSError:
        pass
    tmp = path.with_name(path.name + ".release")
    with h5py.File(path, "r", libver="latest", swmr=True) as src, h5py.File(tmp, "w", libver="latest") as dst:
        dst.attrs.update(src.attrs)
        for key in src:
            src.copy(src[key], dst, name=key)
    os.replace(tmp, path)


# ---------------------------------------------------------------- resume: where from


@dataclass(frozen=True)
class ResumePoint:
    folder: Path
    round: int        # rounds completed: the run continues at this round index
    step: int         # local steps completed: the data stream continues here


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def find_resume_point(resume: str | None, cfg, layout, run_dir: Path) -> ResumePoint | None:
    """`--resume auto` (newest complete checkpoint, none: start fresh) or `--resume PATH`; checked against
    this run's config. Reads files only; the log is made writable again once the checkpoint is accepted."""
    if resume is None:
        return None
    directory = checkpoint_dir(cfg, run_dir)
    if resume == "auto":
        folder = latest_complete(directory, _say)
        if folder is None:
            _say(f"--resume auto: no complete checkpoint in {directory}; starting from round 1")
            return None
    elif not resume.strip():
        raise ResumeError("--resume: give auto or a checkpoint folder (e.g. runs/NAME/ckpt/round_000012)")
    else:
        folder = resolve_checkpoint(Path(resume), _say)
    manifest = check_complete(folder)
    check_compatible(folder, manifest, cfg, layout)
    if manifest["round"] > cfg.rounds:
        raise ResumeError(f"--resume: {folder} is after round {manifest['round']}, but this config has only "
                          f"{cfg.rounds} rounds")
    release_log(Path(run_dir) / "log.h5")
    return ResumePoint(folder, int(manifest["round"]), int(manifest["step"]))


def plan_resume(resume: str | None, cfg, layout, run_dir: Path, mpi) -> ResumePoint | None:
    """Collective over `mpi`: rank 0 finds and checks the checkpoint; every rank gets it, or the same error."""
    if mpi.Get_rank() == 0:
        try:
            decision = (find_resume_point(resume, cfg, layout, run_dir), None)
        except ResumeError as exc:
            decision = (None, str(exc))
        except OSError as exc:  # unreadable files, permissions: the other ranks must hear of it too
            decision = (None, f"--resume: {exc}")
    else:
        decision = None
    point, problem = mpi.bcast(decision, root=0)
    if problem:
        raise ResumeError(problem)
    return point


# ---------------------------------------------------------------- writing, together


class Checkpointer:
    """The round-boundary step that server and trainers run together over `comm` (server = rank 0):
    agree on preemption, and when a checkpoint is due every rank writes its parts, the server the manifest.

    preemption(comm): collective, the name of a preemption signal any rank received ('' when none)."""

    def __init__(self, comm, directory: Path, cfg, layout, preemption: Callable[[object], str],
                 stream=sys.stdout):
        self.comm, self.directory, self.cfg, self.preemption = comm, Path(directory), cfg, preemption
        self.is_root = comm.Get_rank() == 0
        self.meta = {"algorithm": cfg.fed.algorithm, "topology": layout.as_dict(),
                     "signature": run_signature(cfg, layout)}
        self.stream = stream

    def round_end(self, rounds_done: int, parts: Callable[[], dict[str, dict]]) -> bool:
        """Call on every rank after each round; True when the run must stop for preemption (checkpoint written).
        `parts()` gives this rank's {part name: tree}, evaluated only when a checkpoint is written."""
        every, rounds = self.cfg.checkpoint.every, self.cfg.rounds
        signal = self.preemption(self.comm)
        preempted = bool(signal) and rounds_done < rounds
        if preempted or (every and (rounds_done % every == 0 or rounds_done == rounds)):
            folder = self.save(rounds_done, parts())
            if preempted and self.is_root:
                self.stream.write(f"preempted ({signal}): stopped after round {rounds_done}/{self.cfg.rounds} "
                                  f"with checkpoint {folder}; continue with --resume auto\n")
                self.stream.flush()
        return preempted

    def save(self, rounds_done: int, parts: dict[str, dict]) -> Path:
        folder = self.directory / round_folder_name(rounds_done)
        step = rounds_done * self.cfg.fed.K
        if self.is_root:  # before any part is written: a stale manifest must not vouch for new parts
            folder.mkdir(parents=True, exist_ok=True)
            (folder / MANIFEST).unlink(missing_ok=True)
            for leftover in folder.glob(".*.tmp*"):  # from an attempt that died while writing
                leftover.unlink(missing_ok=True)
        self.comm.bcast(None, root=0)
        rank = self.comm.Get_rank()
        written = [write_part(folder, name, tree, {"round": rounds_done, "step": step}, rank)
                   for name, tree in parts.items()]
        everyone = self.comm.gather(written, root=0)
        if self.is_root:
            all_parts = [p for ps in everyone for p in ps]
            write_manifest(folder, rounds_done, step, all_parts, self.meta)
            prune(self.directory, self.cfg.checkpoint.keep)
            size = sum(p.size for p in all_parts)
            self.stream.write(f"  checkpoint {folder} ({len(all_parts)} parts, {size / 2**20:.1f} MiB)\n")
            self.stream.flush()
        return folder
