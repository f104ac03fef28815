"""The sets a party trains on besides its own plain training set: its training images without its held-out ones
(`heldout_split`, data.heldout), and FedFR's combined set of its images and the public images it chose
(`CombinedFaceDataset`)."""
from __future__ import annotations

import numpy as np

from .errors import DataError
from .face_dataset import FaceDataset, FaceSubset


def heldout_split(dataset: FaceDataset, heldout: int) -> tuple[FaceSubset, FaceSubset]:
    """(training, held out): the first `heldout` images of every identity, in the set's order, are held out (the
    split of FedFR's split_FL.py: the first 40 of each identity are its test images). Both keep the identities'
    labels; an identity with no image left to train on is a DataError naming it."""
    labels = dataset.labels
    order = np.argsort(labels, kind="stable")
    starts = np.searchsorted(labels[order], np.arange(dataset.num_classes))
    counts = np.bincount(labels, minlength=dataset.num_classes)
    short = np.flatnonzero(counts <= heldout)
    if len(short):
        where = dataset.describe().get("path", dataset.kind)
        raise DataError(where, f"identity {int(short[0])} has {int(counts[short[0]])} images, data.heldout="
                               f"{heldout} leaves it none to train on")
    rank_in_identity = np.empty(len(labels), dtype=np.int64)
    rank_in_identity[order] = np.arange(len(labels)) - starts[labels[order]]
    held = rank_in_identity < heldout
    return dataset.subset(np.flatnonzero(~held)), dataset.subset(np.flatnonzero(held))


class CombinedFaceDataset(FaceDataset):
    """The party's images (labels 0..n_k−1), then the chosen public images, labelled n_k + their public identity
    (spec §4.3-2): the label space of a classifier holding the party's rows, then every public identity's."""

    kind = "combined"

    def __init__(self, local: FaceDataset, public: FaceDataset | None, chosen: np.ndarray):
        self.local, self.public = local, public
        self.chosen = np.asarray(chosen, dtype=np.int64)
        public_labels = public.labels[self.chosen] if public is not None else np.empty(0, np.int64)
        labels = np.concatenate([local.labels, local.num_classes + public_labels])
        classes = local.num_classes + (public.num_classes if public is not None else 0)
        super().__init__(labels, classes, local.image_size, local.skip_bad)

    def read(self, i: int):
        n = len(self.local)
        return self.local.read(i) if i < n else self.public.read(int(self.chosen[i - n]))

    def members(self) -> list[np.ndarray]:
        return [*self.local.members(), self.chosen]
