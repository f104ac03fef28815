"""Where the trainer and validators get their data: synthetic sets written once as real files, or the
user's RecordIO folders, image folders and `.bin` pair sets, all read through the same readers."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from .face_dataset import FaceDataset, FolderFaceDataset, RecFaceDataset
from .partition import dirichlet_partition, partition_hash
from .faces_emore import write_faces_emore
from .images import encode
from .synthetic import generate_party, style_of
from .synthetic_pairs import PAIR_SETS, generate_pairs
from .verification_bin import write_bin

# Bump when the renderer changes what a seed draws: the folder hash changes with it, old sets are not reused.
GENERATOR_VERSION = 1
JPEG_QUALITY = 95
TRAINING_KINDS = ("synthetic", "rec", "folder")


def _digest(params: dict) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]


def _write_atomically(folder: Path, fill) -> Path:
    """Build `folder` in a temporary sibling with fill(tmp) and rename it into place; if another process
    got there first, keep theirs. A folder that exists is therefore always complete."""
    if folder.is_dir():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the set is shared with other users' runs
        fill(tmp)
        os.rename(tmp, folder)
    except OSError:
        if not folder.is_dir():
            raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def synthetic_params(spec, data_cfg) -> dict:
    style_of(spec.style)  # refuses unknown styles
    return {"generator": GENERATOR_VERSION, "style": spec.style, "identities": int(spec.identities),
            "images_per_identity": int(spec.images_per_identity), "image_size": int(data_cfg.image_size),
            "seed": int(data_cfg.seed), "jpeg_quality": JPEG_QUALITY}


def synthetic_folder(spec, data_cfg) -> Path:
    params = synthetic_params(spec, data_cfg)
    return Path(data_cfg.root) / f"synthetic-{spec.style}-{_digest(params)}"


def _write_synthetic_party(params: dict, tmp: Path) -> None:
    images, labels, keys = generate_party(params["style"], params["identities"], params["images_per_identity"],
                                          params["image_size"], params["seed"], params.get("first", 0))
    jpegs = encode(_as_tensors(images), quality=params["jpeg_quality"])
    per = params["images_per_identity"]
    groups = [jpegs[i * per:(i + 1) * per] for i in range(params["identities"])]
    write_faces_emore(tmp / "train.rec", tmp / "train.idx", groups, identity_ids=keys)
    meta = {**params, "identity_keys": [f"{int(k):016x}" for k in keys]}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))


def _as_tensors(images: np.ndarray) -> list[torch.Tensor]:
    return [torch.from_numpy(im) for im in images]


def prepare_training_set(spec, data_cfg) -> Path:
    """The folder holding the party's data, generating a synthetic set first if it is not there yet."""
    kind = spec.kind
    if kind == "synthetic":
        params = synthetic_params(spec, data_cfg)
        return _write_atomically(synthetic_folder(spec, data_cfg), lambda tmp: _write_synthetic_party(params, tmp))
    path = Path(spec.path)
    if kind == "rec":
        for name in ("train.rec", "train.idx"):
            if not (path / name).is_file():
                raise FileNotFoundError(f"data.kind=rec: {path / name} not found (path must be a folder with "
                                        f"train.rec and train.idx)")
        return path
    if kind == "folder":
        if not path.is_dir():
            raise FileNotFoundError(f"data.kind=folder: {path} is not a folder of identity sub-folders")
        return path
    raise ValueError(f"data kind {kind!r}: expected one of {', '.join(TRAINING_KINDS)}")


def prepare_heldout_identities(spec, data_cfg, first: int) -> Path:
    """A RecordIO folder of identities first..first+n-1 of a synthetic party's style (n, images, size and seed as
    the party's): the party's generator and prior, people the party (identities 0..n-1) does not hold."""
    params = {**synthetic_params(spec, data_cfg), "first": int(first)}
    folder = Path(data_cfg.root) / f"synthetic-{spec.style}-heldout-{_digest(params)}"
    return _write_atomically(folder, lambda tmp: _write_synthetic_party(params, tmp))


def open_training_set(spec, data_cfg) -> FaceDataset:
    """The party's dataset (its part of the split by identity), labels 0..C_i-1, images image_size square."""
    path = prepare_training_set(spec, data_cfg)
    common = dict(image_size=data_cfg.image_size, skip_bad=getattr(data_cfg, "skip_bad", False),
                  split_index=getattr(spec, "split_index", 0), split_count=getattr(spec, "split_count", 1))
    if spec.kind == "folder":
        dataset = FolderFaceDataset(path, **common)
    else:
        dataset = RecFaceDataset(path, kind=spec.kind, **common)
    if getattr(spec, "shuffle_labels", False):  # every image gets a random one of the party's labels
        dataset.labels = np.random.default_rng([data_cfg.seed, 0x5EED]).permutation(dataset.labels)
    clients = getattr(spec, "dirichlet_clients", 0)
    if clients:
        dataset = dirichlet_client(dataset, clients, spec.dirichlet_client, spec.dirichlet_alpha, spec.dirichlet_seed)
    return dataset


def dirichlet_client(dataset: FaceDataset, clients: int, client: int, alpha: float, seed: int) -> FaceDataset:
    """One client of a Dirichlet partition of `dataset` (Hsu et al.); the partition's seed and hash go to the
    run log through describe()."""
    parts = dirichlet_partition(dataset.labels, clients, alpha, seed)
    subset = dataset.subset(parts[client])
    subset.partition = {"alpha": float(alpha), "seed": int(seed), "clients": int(clients), "client": int(client),
                        "hash": partition_hash(parts)}
    return subset


def validation_params(data_cfg) -> dict:
    return {"generator": GENERATOR_VERSION, "sets": list(data_cfg.val_sets), "image_size": int(data_cfg.image_size),
            "pairs_per_fold": int(data_cfg.val_pairs_per_fold), "seed": int(data_cfg.seed),
            "jpeg_quality": JPEG_QUALITY}


def validation_folder(data_cfg) -> Path:
    return Path(data_cfg.root) / f"val-{_digest(validation_params(data_cfg))}"


def write_pair_set(params: dict, name: str, folder: Path) -> list[str]:
    """Write the synthetic set `name` as folder/<name>.bin; returns its identity keys (for meta.json)."""
    images, same, identity = generate_pairs(name, params["pairs_per_fold"], params["image_size"], params["seed"])
    write_bin(folder / f"{name}.bin", encode(_as_tensors(images), quality=params["jpeg_quality"]), same)
    return [f"{int(k):016x}" for k in identity]


def _write_pairs_meta(params: dict, keys: dict, folder: Path) -> None:
    (folder / "meta.json").write_text(json.dumps({**params, "identity_keys": keys}, indent=1))


def _write_synthetic_pairs(params: dict, tmp: Path) -> None:
    _write_pairs_meta(params, {name: write_pair_set(params, name, tmp) for name in params["sets"]}, tmp)


def stage_pair_set(data_cfg, name: str, staging: Path) -> None:
    """One set of the synthetic validation folder, written into `staging` by one of several ranks
    (fedmpi/data/preparation.py); `assemble_pair_sets` then moves them into place."""
    staging.mkdir(parents=True, exist_ok=True)
    keys = write_pair_set(validation_params(data_cfg), name, staging)
    (staging / f"{name}.keys.json").write_text(json.dumps(keys))


def assemble_pair_sets(data_cfg, staging: Path) -> Path:
    """The validation folder from the sets staged by `stage_pair_set` (the same files a single writer makes)."""
    params = validation_params(data_cfg)

    def fill(tmp: Path) -> None:
        keys = {}
        for name in params["sets"]:
            os.replace(staging / f"{name}.bin", tmp / f"{name}.bin")
            keys[name] = json.loads((staging / f"{name}.keys.json").read_text())
        _write_pairs_meta(params, keys, tmp)

    folder = _write_atomically(validation_folder(data_cfg), fill)
    shutil.rmtree(staging, ignore_errors=True)
    return folder


def prepare_validation_sets(data_cfg) -> dict[str, Path]:
    """{set name: path of its `.bin`}: synthetic sets are generated once; real ones must exist in val_path."""
    names = list(data_cfg.val_sets)
    if data_cfg.val_kind == "synthetic":
        unknown = [n for n in names if n not in PAIR_SETS]
        if unknown:
            raise ValueError(f"data.val_sets: no synthetic set named {unknown[0]!r} (known: {', '.join(PAIR_SETS)})")
        params = validation_params(data_cfg)
        folder = _write_atomically(validation_folder(data_cfg), lambda tmp: _write_synthetic_pairs(params, tmp))
    elif data_cfg.val_kind == "bin":
        folder = Path(data_cfg.val_path)
        missing = [str(folder / f"{n}.bin") for n in names if not (folder / f"{n}.bin").is_file()]
        if missing:
            raise FileNotFoundError(f"data.val_kind=bin: validation set not found: {missing[0]}")
    else:
        raise ValueError(f"data.val_kind {data_cfg.val_kind!r}: expected synthetic or bin")
    return {n: folder / f"{n}.bin" for n in names}
