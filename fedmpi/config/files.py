"""The files a config names, checked before any rank loads torch: each missing one is a ConfigError naming the
setting to fix, e.g. `parties.orgA.data.path: data/orgX/train.rec not found (...)`. Only paths are looked at here;
what is inside a file is the readers' to judge (fedmpi/data)."""
from __future__ import annotations

from pathlib import Path

from fedmpi.errors import ConfigError

REC_FILES = ("train.rec", "train.idx")


def check_source(kind: str, path: str, key: str) -> None:
    """A rec or folder training set at `path`, named by its setting `key` (e.g. parties.orgA.data.path)."""
    if kind == "rec":
        for name in REC_FILES:
            if not (Path(path) / name).is_file():
                raise ConfigError(f"{key}: {Path(path) / name} not found (a rec set is a folder holding train.rec "
                                  f"and train.idx, as `python -m tools.pack_rec FOLDER {path}/train` writes them)")
    elif kind == "folder" and not Path(path).is_dir():
        raise ConfigError(f"{key}: {path} is not a folder (a folder set holds one sub-folder of images per identity)")


def check_files(cfg) -> None:
    """Every training set, the public set, the `.bin` validation sets a run reads and the starting model's files."""
    for party in [] if cfg.cross_device else cfg.parties:
        if cfg.fed.setting == "solo" and party.name != cfg.fed.solo_party:
            continue
        check_source(party.data.kind, party.data.path, f"parties.{party.name}.data.path")
    if cfg.data.public.kind:
        check_source(cfg.data.public.kind, cfg.data.public.path, "data.public.path")
    from fedmpi.config.sections import fv_runs

    reads_pairs = not cfg.cross_device and (fv_runs(cfg) or cfg.eval.every > 0)
    if reads_pairs and cfg.data.val_kind == "bin":
        for name in cfg.data.val_sets:
            if not (Path(cfg.data.val_path) / f"{name}.bin").is_file():
                raise ConfigError(f"data.val_path: {Path(cfg.data.val_path) / f'{name}.bin'} not found (data.val_sets "
                                  f"names {name}; data.val_path is the folder of the sets' .bin files)")
    for key in ("init", "init_classifier"):
        path = getattr(cfg.model, key)
        if path and not Path(path).is_file():
            raise ConfigError(f"model.{key}: {path} not found")
