"""Identities no party trained on, for membership inference in the silo (spec §5.2): folders in a party's own
format (RecordIO train.rec / train.idx, read by fedmpi's reader) of held-out identities of the same distribution
as the parties' (the study writes them with the parties' synthetic generator: data/sets.py,
prepare_heldout_identities). Read to score the attack only; a folder that cannot serve is refused in one line."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .run_view import Refused, opened

OPTION = "--nonmembers"


def read_folder(cfg, folder: Path):
    """The folder's RecFaceDataset at the run's image size, or Refused naming what is wrong with it."""
    from fedmpi.data.face_dataset import RecFaceDataset

    missing = [name for name in ("train.rec", "train.idx") if not (folder / name).is_file()]
    if missing:
        raise Refused(f"{OPTION} {folder}: no {missing[0]} (a folder of held-out identities in RecordIO, "
                      f"train.rec and train.idx, as a party's data.kind=rec)")
    try:
        dataset = RecFaceDataset(folder, image_size=cfg.data.image_size)
    except (OSError, ValueError) as error:
        raise Refused(f"{OPTION} {folder}: cannot be read ({str(error).splitlines()[0]})") from None
    if not np.any(np.bincount(dataset.labels) >= 2):
        raise Refused(f"{OPTION} {folder}: no identity has 2 images (an identity is scored by the mean cosine of "
                      f"its images' pairs)")
    return dataset


def shared_identities(dataset, party_ids: dict) -> None:
    """Refused when the folder holds a party's identity (by the RecordIO identity ids both carry; 0 is unset)."""
    mine = {int(k) for k in getattr(dataset, "identity_ids", []) if int(k)}
    for party, ids in party_ids.items():
        shared = mine & {int(k) for k in ids if int(k)}
        if shared:
            raise Refused(f"{OPTION} {dataset.folder}: {len(shared)} of its identities are party {party}'s "
                          f"(identity id {min(shared):x}): non-members must be identities no party trained on")


def party_identity_ids(cfg) -> dict:
    """{party: the RecordIO identity ids of its training set} where its reader carries them."""
    from fedmpi.layout import build_layout
    from fedmpi.silo.party_data import open_party_dataset

    return {party.name: getattr(opened(cfg, party.specs, f"the ground truth of party {party.name}",
                                       lambda: open_party_dataset(party, cfg.data)), "identity_ids", [])
            for party in build_layout(cfg).parties}


def heldout_images(cfg, folders) -> tuple[torch.Tensor, np.ndarray]:
    """Every folder's images (in [-1, 1]) and identities, numbered 0.. across the folders in order."""
    images, identities, offset = [], [], 0
    party_ids = party_identity_ids(cfg)
    for folder in map(Path, folders):
        dataset = read_folder(cfg, folder)
        shared_identities(dataset, party_ids)
        images += [dataset[i][0] for i in range(len(dataset))]
        identities.append(dataset.labels + offset)
        offset += dataset.num_classes
    return torch.stack(images), np.concatenate(identities)
