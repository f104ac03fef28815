"""Who holds which data: even silo splits by identity, and the Dirichlet label-skew partitions of Hsu, Qi and Brown
(2019, Sec. 3), in the two forms the settings use:

  dirichlet_partition   a silo party as one client of a partition (parties.NAME.data.dirichlet_*): client k's class
                        counts are floor(n / clients) * q_k, q_k ~ Dir(alpha p), rounded by largest remainders
  hsu_partition         the cross-device clients: each of client k's n images' class is drawn from q_k and the
                        image taken without replacement from that class's pool (the paper's procedure)

Both shuffle each class's pool once by the seed, draw alpha = 0 (one class per client) among the classes that still
hold n images with probability p, and refill a client whose classes ran dry from q_k, then from p, restricted to
the classes with images left; they differ in how a client's mix becomes its images, so each keeps its own stream
of draws (a partition is reproduced bitwise from its seed).
"""
from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np


def split_by_identity(num_identities: int, count: int, index: int) -> np.ndarray:
    """Identities of part `index` of `count` even, contiguous parts (sizes differ by at most one)."""
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"split index {index} must lie in 0..{count - 1} (split_count={count})")
    if num_identities < count:
        raise ValueError(f"cannot split {num_identities} identities into {count} non-empty parts")
    lo = index * num_identities // count
    hi = (index + 1) * num_identities // count
    return np.arange(lo, hi, dtype=np.int64)


def dirichlet_partition(labels: Sequence[int], num_clients: int, alpha: float, seed: int,
                        prior: Sequence[float] | None = None) -> list[np.ndarray]:
    """Hsu et al. (2019): client k's class mix q_k ~ Dir(alpha * p), examples drawn without replacement.

    Every client gets floor(n / num_clients) examples. `prior` p defaults to the class frequencies of
    `labels`. alpha = 0 gives each client a single class, chosen with probability proportional to p among
    the classes that still hold enough examples. When a class runs out, the client's remaining draws follow
    q renormalised over the classes that still have examples. Class counts are size * q rounded by largest
    remainders, so a large alpha gives every client the prior's mix. Returns one sorted index array per client.
    """
    labels = np.asarray(labels, dtype=np.int64)
    if num_clients < 1 or len(labels) < num_clients:
        raise ValueError(f"cannot partition {len(labels)} examples among {num_clients} clients")
    if alpha < 0:
        raise ValueError(f"Dirichlet alpha must be >= 0, got {alpha}")
    p = class_prior(labels, prior, int(labels.max()) + 1)
    rng = np.random.default_rng(seed)
    pools = class_pools(rng, labels, len(p))
    left = np.array([len(pool) for pool in pools])
    size = len(labels) // num_clients
    parts = []
    for _ in range(num_clients):
        counts = _one_class(rng, p, left, size) if alpha == 0 else _dirichlet_counts(rng, alpha * p, left, size)
        taken = []
        for c in np.flatnonzero(counts):
            used = len(pools[c]) - left[c]
            taken.append(pools[c][used:used + counts[c]])
            left[c] -= counts[c]
        parts.append(np.sort(np.concatenate(taken)))
    return parts


def class_prior(labels: np.ndarray, prior, classes: int) -> np.ndarray:
    """p: the given class weights, or the class frequencies of `labels`; normalised, checked."""
    p = np.bincount(labels, minlength=classes).astype(np.float64) if prior is None else np.asarray(prior, np.float64)
    if p.shape != (classes,) or (p < 0).any() or p.sum() <= 0:
        raise ValueError(f"prior must be {classes} non-negative weights, got shape {p.shape}")
    return p / p.sum()


def class_pools(rng, labels: np.ndarray, classes: int) -> list[np.ndarray]:
    """Each class's examples in an order shuffled once by the seed; clients take them front to back."""
    return [rng.permutation(np.flatnonzero(labels == c)) for c in range(classes)]


def one_class_with_room(rng, p, left, n) -> int | None:
    """alpha = 0: a class drawn with probability p among those that still hold n examples (None: none does)."""
    room = p * (left >= n)
    if room.sum() == 0:
        return None
    return int(rng.choice(len(p), p=room / room.sum()))


def _one_class(rng, p, left, size) -> np.ndarray:
    c = one_class_with_room(rng, p, left, size)
    if c is None:  # no class holds a whole client's share: one of the fullest classes, by p
        weights = p * (left == left.max())
        c = rng.choice(len(p), p=weights / weights.sum())
    counts = np.zeros(len(p), dtype=np.int64)
    counts[c] = min(size, left[c])
    return counts


def _dirichlet_counts(rng, concentration, left, size) -> np.ndarray:
    q = rng.gamma(concentration)  # Dir(alpha p) as normalised gammas; zero-weight classes stay at zero
    if q.sum() == 0:  # every gamma underflowed (tiny alpha): the limit is one class drawn by p
        q = np.zeros_like(q)
        q[rng.choice(len(q), p=concentration / concentration.sum())] = 1.0
    counts = np.zeros(len(q), dtype=np.int64)
    need = size
    while need > 0:
        room = left - counts
        weights = q * (room > 0)
        if weights.sum() == 0:  # the client's classes are exhausted: continue with the prior's, then any
            weights = concentration * (room > 0)
            if weights.sum() == 0:
                weights = (room > 0).astype(np.float64)
        # largest remainders: the counts closest to need * q that sum to need
        share = need * weights / weights.sum()
        add = np.floor(share).astype(np.int64)
        add[np.argsort(add - share, kind="stable")[:need - int(add.sum())]] += 1
        add = np.minimum(add, room)
        counts += add
        need -= int(add.sum())
    return counts


def hsu_partition(labels: Sequence[int], clients: int, images_per_client: int, alpha: float, seed: int,
                  prior: Sequence[float] | None = None, classes: int | None = None) -> list[np.ndarray]:
    """One sorted index array of exactly `images_per_client` examples per client (disjoint).

    A dry pool: the client's n classes are drawn from q_k; the draws a class's pool cannot serve (its last ones in
    draw order) are drawn again, one by one, from q_k restricted to the classes that still have images
    (renormalised); when none of q_k's classes has any left, from the prior p restricted the same way. So every
    client holds exactly n images whenever clients x n <= the set's size. alpha = 0: the population must fit one
    class per client (an error otherwise)."""
    labels = np.asarray(labels, dtype=np.int64)
    n = int(images_per_client)
    if clients < 1 or n < 1:
        raise ValueError(f"need at least one client of at least one image, got {clients} x {n}")
    if clients * n > len(labels):
        raise ValueError(f"{clients} clients x {n} images = {clients * n} exceeds the {len(labels)} images")
    if not alpha >= 0:
        raise ValueError(f"Dirichlet alpha must be >= 0, got {alpha}")
    N = classes or int(labels.max()) + 1
    p = class_prior(labels, prior, N)
    rng = np.random.default_rng(seed)
    pools = class_pools(rng, labels, N)
    used = np.zeros(N, dtype=np.int64)
    parts = []
    for k in range(clients):
        left = np.array([len(pool) for pool in pools]) - used
        drawn = _hsu_one_class(rng, p, left, n, k) if alpha == 0 else _image_classes(rng, alpha * p, p, left, n)
        counts = np.bincount(drawn, minlength=N)
        parts.append(np.sort(np.concatenate([pools[c][used[c]:used[c] + counts[c]] for c in np.flatnonzero(counts)])))
        used += counts
    return parts


def _hsu_one_class(rng, p, left, n, k) -> np.ndarray:
    c = one_class_with_room(rng, p, left, n)
    if c is None:
        raise ValueError(f"alpha = 0: no class has {n} images left for client {k} (left per class: "
                         f"{left.tolist()})")
    return np.full(n, c)


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


def partition_hash(parts: Sequence[Sequence[int]]) -> str:
    """A short, order-sensitive fingerprint of index arrays, for the run log."""
    h = hashlib.sha256()
    for part in parts:
        arr = np.ascontiguousarray(np.asarray(part, dtype=np.int64))
        h.update(len(arr).to_bytes(8, "little"))
        h.update(arr.tobytes())
    return h.hexdigest()[:16]
