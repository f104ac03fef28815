"""The auditor's ground truth for template re-identification and membership: every identity of the run's
participants embedded under a model (the server's Θ), from the participants' own images (read to score an attack
only; a synthetic set is read where the run wrote it, never generated here). An identity is numbered as the
recording names a row's owner: silo party k's label i is identity offset_k + i (the parties in the run's order);
face client c's row j is identity c·n + j (crossdevice/face_clients.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .run_view import client_images, embed, model_at, party_images

BATCH = 256


@dataclass(frozen=True)
class Gallery:
    """Embeddings [N, d] of the images of `identity` [N]; `offsets[s]`: sender s's first identity; `counts[s]`:
    how many identities sender s holds (a party's class count, or n for every client)."""
    embeddings: torch.Tensor
    identity: np.ndarray
    offsets: np.ndarray
    counts: np.ndarray

    def owner(self, sender, label) -> np.ndarray:
        """The identity of row `label` of `sender` (arrays alike)."""
        return self.offsets[np.asarray(sender)] + np.asarray(label)

    def sender_identities(self, sender: int) -> np.ndarray:
        return self.offsets[sender] + np.arange(self.counts[sender])


def embed_all(model, images: torch.Tensor, dtype) -> torch.Tensor:
    return torch.cat([embed(model, images[i:i + BATCH].to(dtype)) for i in range(0, len(images), BATCH)])


def build_gallery(cfg, theta: torch.Tensor, model=None) -> Gallery:
    """Every participant identity's images under Θ (`model`: the run's backbone already holding it)."""
    model = model if model is not None else model_at(cfg, theta)[0]
    if cfg.cross_device:
        parts = client_images(cfg, range(cfg.clients.population))
        images, identity = torch.cat([x for x, _ in parts]), np.concatenate([y for _, y in parts])
        n, population = cfg.clients.identities_per_client, cfg.clients.population
        return Gallery(embed_all(model, images, theta.dtype), identity, np.arange(population) * n,
                       np.full(population, n))
    from fedmpi.layout import build_layout

    embedded, identities, counts = [], [], []
    for party in build_layout(cfg).parties:
        images, labels = party_images(cfg, party.name)
        identities.append(labels + sum(counts))
        counts.append(int(labels.max()) + 1)
        embedded.append(embed_all(model, images, theta.dtype))
    counts = np.array(counts)
    return Gallery(torch.cat(embedded), np.concatenate(identities), np.r_[0, np.cumsum(counts)[:-1]], counts)


def far_threshold(gallery: Gallery, far: float, seed: int, most: int = 1500) -> float:
    """The verification threshold at `far` on every pair of (at most `most`, drawn by `seed`) gallery images."""
    from .scoring import pair_threshold

    pick = np.arange(len(gallery.identity))
    if len(pick) > most:
        pick = np.sort(np.random.default_rng(seed).choice(pick, most, replace=False))
    return pair_threshold(gallery.embeddings[torch.as_tensor(pick)], gallery.identity[pick], far)
