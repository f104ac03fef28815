"""Hsu, Qi and Brown (2019), Sec. 3: a population of clients with label skew set by one number alpha.

For each client k: q_k ~ Dir(alpha p), p the class prior; then each of its n images' class is drawn from q_k
and the image is taken, without replacement, from that class's pool (pools shuffled once by the seed).

A dry pool: the client's n classes are drawn from q_k; the draws a class's pool cannot serve (its last ones in
draw order) are drawn again, one by one, from q_k restricted to the classes that still have images
(renormalised); when none of q_k's classes has any left, from the prior p restricted the same way. So every
client holds exactly n images whenever clients x n <= the set's size.
alpha = 0 is the limit of one class per client: the class is drawn from p among the classes that still hold
at least n images (none left: an error, the population does not fit one class per client).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def hsu_partition(labels: Sequence[int], clients: int, images_per_client: int, alpha: float, seed: int,
                  prior: Sequence[float] | None = None, classes: int | None = None) -> list[np.ndarray]:
    """One sorted index array of exactly `images_per_client` examples per client (disjoint)."""
    labels = np.asarray(labels, dtype=np.int64)
    n = int(images_per_client)
    if clients < 1 or n < 1:
        raise ValueError(f"need at least one client of at least one image, got {clients} x {n}")
    if clients * n > len(labels):
        raise ValueError(f"{clients} clients x {n} images = {clients * n} exceeds the {len(labels)} images")
    if not alpha >= 0:
        raise ValueError(f"Dirichlet alpha must be >= 0, got {alpha}")
    N = classes or int(labels.max()) + 1
    p = np.bincount(labels, minlength=N).astype(np.float64) if prior is None else np.asarray(prior, np.float64)
    if p.shape != (N,) or (p < 0).any() or p.sum() <= 0:
        raise ValueError(f"prior must be {N} non-negative weights, got shape {p.shape}")
    p = p / p.sum()
    rng = np.random.default_rng(seed)
    pools = [rng.permutation(np.flatnonzero(labels == c)) for c in range(N)]
    used = np.zeros(N, dtype=np.int64)
    parts = []
    for k in range(clients):
        left = np.array([len(pool) for pool in pools]) - used
        drawn = _one_class(rng, p, left, n, k) if alpha == 0 else _image_classes(rng, alpha * p, p, left, n)
        counts = np.bincount(drawn, minlength=N)
        parts.append(np.sort(np.concatenate([pools[c][used[c]:used[c] + counts[c]] for c in np.flatnonzero(counts)])))
        used += counts
    return parts


def _one_class(rng, p, left, n, k) -> np.ndarray:
    room = p * (left >= n)
    if room.sum() == 0:
        raise ValueError(f"alpha = 0: no class has {n} images left for client {k} (left per class: "
                         f"{left.tolist()})")
    return np.full(n, rng.choice(len(p), p=room / room.sum()))


def _image_classes(rng, concentration, p, left, n) -> np.ndarray:
    q = rng.standard_gamma(concentration)  # Dir(alpha p) as normalised gammas; zero-prior classes stay at zero
    if q.sum() == 0:  # every gamma underflowed (tiny alpha): the limit is one class drawn by p
        q = np.zeros_like(q)
        q[rng.choice(len(q), p=p)] = 1.0
    q = q / q.sum()
    drawn = rng.choice(len(q), size=n, p=q)
    counts = np.bincount(drawn, minlength=len(q))
    if (counts <= left).all():
        return drawn
    # the draws past a pool's end (the last ones of their class, in draw order) are drawn again, one by one
    occurrence = np.empty(n, dtype=np.int64)
    order = np.argsort(drawn, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    occurrence[order] = np.arange(n) - np.repeat(starts, counts)
    taken = np.minimum(counts, left)
    for i in np.flatnonzero(occurrence >= left[drawn]):
        room = left > taken
        weights = q * room if (q * room).sum() > 0 else p * room
        if weights.sum() == 0:
            weights = room.astype(np.float64)
        c = drawn[i] = rng.choice(len(q), p=weights / weights.sum())
        taken[c] += 1
    return drawn


def client_class_histogram(parts: Sequence[np.ndarray], labels: Sequence[int], classes: int) -> np.ndarray:
    """int64 [clients, classes]: how many images of each class each client holds."""
    labels = np.asarray(labels, dtype=np.int64)
    return np.stack([np.bincount(labels[np.asarray(part, dtype=np.int64)], minlength=classes) for part in parts])
