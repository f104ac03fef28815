"""The face clients of the cross-device simulation (`clients.dataset=faces`): a phone per person, as in Yu et al.
(2020) and Aggarwal et al.'s FedFace (2021). Client c holds identities [c·n, (c+1)·n) of a face training set
(RecordIO, image folder or the synthetic set; data/sets.py's readers), n = clients.identities_per_client (1: its
owner; a few: an album), and every image of them; its labels are its own rows 0..n-1 (the class embeddings it
keeps, crossdevice/class_rows.py). M may be up to the set's identity count / n."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedmpi.data.partition import partition_hash
from fedmpi.data.sets import open_training_set


@dataclass
class FaceClients:
    dataset: object              # the FaceDataset (labels 0..identities-1)
    parts: list[np.ndarray]      # client c's image indices into dataset
    per_client: int              # identities (class-embedding rows) per client
    description: dict            # for the run log's /data

    def sizes(self) -> np.ndarray:
        return np.array([len(p) for p in self.parts], dtype=np.int64)

    def batch(self, indices: np.ndarray, generator: torch.Generator, augment: bool, dtype) -> tuple:
        """(images float [b, 3, H, W] in [-1, 1], the client's rows [b]) of the dataset's `indices` (one client's);
        `augment`: a random horizontal flip per image (the face trainer's only augmentation)."""
        flips = (torch.rand(len(indices), generator=generator) < 0.5).tolist() if augment else [False] * len(indices)
        items = [self.dataset[(int(i), f)] for i, f in zip(indices, flips)]
        x = torch.stack([image for image, _ in items]).to(dtype)
        y = torch.tensor([label % self.per_client for _, label in items], dtype=torch.int64)
        return x, y


IDLE_LOSS = 1e-3      # a positive-only loss below this at a launch's first round: the rows already met ν_pos


def idle_loss_line(cfg, r: int, loss: float) -> str:
    """One line where the face clients' loss is ~0 from the first round: w_c starts as the normalised sum of its
    owner's unit features under the start, and a start that maps every face close to one direction (an untrained
    backbone) gives ŵ_c·f̂(x) ≥ ν_pos for every image, so (max(0, ν_pos − ŵ_c·f̂(x)))² has nothing to pull."""
    if not 0 <= loss < IDLE_LOSS:
        return ""
    from fedmpi.core.progress import loss_text

    return (f"clients' loss {loss_text(loss)} at round {r + 1}: the class rows already meet ν_pos = "
            f"{cfg.clients.positive_margin:g} under this start (it maps every face close to one direction), so the "
            f"clients have almost nothing to learn; start from a model that tells faces apart (model.init=FILE, "
            f"README: 'A phone per person') or raise clients.positive_margin")


def face_partition(labels: np.ndarray, population: int, per_client: int) -> list[np.ndarray]:
    """Client c's image indices: those of identities [c·per_client, (c+1)·per_client)."""
    owner = labels // per_client
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(population + 1))
    return [order[bounds[c]:bounds[c + 1]].astype(np.int64) for c in range(population)]


def open_face_clients(cfg) -> FaceClients:
    c = cfg.clients
    dataset = open_training_set(c.faces, cfg.data)
    if c.population * c.identities_per_client > dataset.num_classes:
        raise ValueError(f"clients.population: {c.population} clients x {c.identities_per_client} identities "
                         f"exceed the {dataset.num_classes} identities of clients.faces")
    parts = face_partition(dataset.labels, c.population, c.identities_per_client)
    empty = [k for k, p in enumerate(parts) if len(p) == 0]
    if empty:
        raise ValueError(f"clients.faces: client {empty[0]} has no images (identities without images in the set)")
    description = {"dataset": "faces", **dataset.describe(),
                   "clients": {"population": len(parts), "identities_per_client": c.identities_per_client,
                               "images": int(sum(len(p) for p in parts)), "hash": partition_hash(parts)}}
    return FaceClients(dataset, parts, c.identities_per_client, description)
