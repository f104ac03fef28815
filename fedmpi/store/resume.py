"""Resume planning: which checkpoint `--resume` continues from, whether this run may continue it, and what
happens to the run log and to checkpoints of an abandoned history (lineage).

Choosing and checking a checkpoint does not load it (no torch), so that a refused launch ends at once."""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import h5py

from fedmpi.store.h5log import open_log
from fedmpi.store.manifest import SERVER_PART, ResumeError, check_complete, latest_complete, resolve_checkpoint
from fedmpi.store.party_batches import check_party_batches


def checkpoint_dir(cfg, run_dir: Path) -> Path:
    return Path(cfg.checkpoint.dir) if cfg.checkpoint.dir else Path(run_dir) / "ckpt"


SIGNATURE_LABELS = {"topology": "topology", "algorithm": "fed.algorithm", "K": "fed.K", "model": "model",
                    "classifier": "model.classifier"}


def run_signature(cfg, layout) -> dict:
    """What a checkpoint's state depends on; a resume with any of these changed is refused. (Validators hold
    no state: their number may change; so may a party's rank count, `party_batch_changes`.)"""
    m = cfg.model
    from fedmpi.algorithms.registry import method_key

    solo = f" ({cfg.fed.solo_party})" if cfg.fed.solo_party else ""
    algorithm = method_key(cfg.fed.algorithm, cfg.fed.setting) + solo
    topology = " + ".join(["1 server", *(p.name for p in layout.parties)])
    return {"topology": topology, "algorithm": algorithm, "K": cfg.fed.K,
            "model": f"{m.backbone} width {m.width} embedding {m.embedding_size} input {cfg.data.image_size} "
                     f"{cfg.run.dtype}",
            "classifier": m.classifier}


def _without_rank_counts(topology):
    """A signature's topology as this fedmpi writes it: checkpoints of the earlier format name each party with
    its rank count ('1 server + ms1m 8 + ga 4'), which a resume may now change."""
    if not isinstance(topology, str):
        return topology
    return " + ".join(re.sub(r" \d+$", "", piece) for piece in topology.split(" + "))


def check_compatible(folder: Path, manifest: dict, cfg, layout) -> None:
    saved = dict(manifest.get("signature", {}))
    saved["topology"] = _without_rank_counts(saved.get("topology"))
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
    with open_log(path) as src, h5py.File(tmp, "w", libver="latest") as dst:
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
    changes: dict = field(default_factory=dict)   # {dotted key: [checkpoint's value, this run's]} accepted


# Keys a resume may change freely: where things are written or read from, how long to wait, how many workers.
# Any other change alters what the run computes and needs --allow-config-changes.
FREE_KEYS = ("log.", "checkpoint.", "run.collective_timeout_s", "run.device", "run.save_final", "data.workers",
             "data.root", "data.val_path", "eval.batch_size")


def _flat(tree, prefix: str = "") -> dict:
    if isinstance(tree, dict):
        return {k: v for key, value in tree.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
    return {prefix[:-1]: tree}


def saved_config(folder: Path) -> dict:
    """The config a checkpoint's run was computed with, as plain data."""
    import yaml

    try:
        with h5py.File(Path(folder) / SERVER_PART, "r") as f:
            return yaml.safe_load(f["config"].asstr()[()])
    except (OSError, KeyError, yaml.YAMLError) as exc:
        raise ResumeError(f"--resume: {folder}/{SERVER_PART}: cannot read the run's config ({exc})") from None


# How a party's batch is split over its ranks: the layout's, which a resume may change while the party's
# batch per step stays (`party_batch_changes`); optim.batch_size is then only the default batch per rank.
LAYOUT_KEYS = ("ranks", "batch_size")


def _without_layout(tree: dict, cross_device: bool) -> dict:
    tree = dict(tree)
    tree["parties"] = [{k: v for k, v in p.items() if k not in LAYOUT_KEYS} for p in tree.get("parties", [])]
    if not cross_device:   # across devices optim.batch_size is the clients' batch: a change of the run
        tree["optim"] = {k: v for k, v in tree.get("optim", {}).items() if k != "batch_size"}
    return tree


def config_changes(folder: Path, cfg) -> dict:
    """{dotted key: [value in the checkpoint's config, value now]} for every key that changes the run (but for
    the layout's split of a party's batch over its ranks, `party_batch_changes`)."""
    from fedmpi.config import to_dict
    from fedmpi.config.rules import unread_keys

    saved = _with_defaults(saved_config(folder), to_dict(type(cfg)()))
    before = _flat(_without_layout(saved, cfg.cross_device))
    now = _flat(_without_layout(to_dict(cfg), cfg.cross_device))
    unread = unread_keys(cfg)
    return {key: [before.get(key), now.get(key)] for key in sorted(set(before) | set(now))
            if before.get(key) != now.get(key) and not key.startswith(FREE_KEYS) and key not in unread}


def _with_defaults(saved: dict, defaults: dict) -> dict:
    """The checkpoint's config with the settings it predates at their defaults (e.g. fed.upload_check, added after
    it was written): a setting the run never had is not a change of it."""
    out = dict(saved)
    for key, value in defaults.items():
        if key not in out:
            out[key] = value
        elif isinstance(value, dict) and value and isinstance(out[key], dict) and key not in SCHEMA_FREE_DICTS:
            out[key] = _with_defaults(out[key], value)
    return out


# sections whose keys are the rule's or the aggregator's own, not the schema's: taken as they were saved
SCHEMA_FREE_DICTS = ("options", "aggregation")


def check_changes(folder: Path, cfg, allowed: bool) -> dict:
    changes = config_changes(folder, cfg)
    if changes and not allowed:
        listed = ", ".join(f"{key} {old!r} -> {new!r}" for key, (old, new) in changes.items())
        raise ResumeError(f"--resume: this run changes what {folder} was computed with ({listed}); resume with "
                          f"the same values, or add --allow-config-changes to continue with the new ones (the "
                          f"changes are recorded in the log)")
    return changes


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def find_resume_point(resume: str | None, cfg, layout, run_dir: Path,
                      allow_changes: bool = False) -> ResumePoint | None:
    """`--resume auto` (newest complete checkpoint of this run's lineage; none: start fresh) or `--resume PATH`,
    checked against this run's config. Then the run's history is made consistent with where it continues:
    checkpoints after that point are moved aside (`lineage.set_aside_future`), an earlier log that cannot be
    continued is kept under another name, a log left open by a killed server is made writable again."""
    from fedmpi.store import lineage

    directory = checkpoint_dir(cfg, run_dir)
    log = Path(run_dir) / "log.h5"
    if resume is None:
        lineage.set_aside_future(directory, 0, _say)
        return None
    if resume == "auto":
        folder = latest_complete(directory, _say)
        if folder is None:
            reason = f"--resume auto: no complete checkpoint in {directory}"
            if log.exists():
                lineage.keep_earlier_log(log, cfg.rounds, reason, _say)
            else:
                _say(f"{reason}; starting from round 1")
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
    changes = {**check_party_batches(folder, manifest, saved_config(folder), cfg, layout, allow_changes),
               **check_changes(folder, cfg, allow_changes)}
    rounds_done = int(manifest["round"])
    abandoned = lineage.set_aside_future(directory, rounds_done, _say)
    if abandoned is not None:
        lineage.keep_log_copy(log, abandoned, _say)
    release_log(log)
    return ResumePoint(folder, rounds_done, int(manifest["step"]), changes)
