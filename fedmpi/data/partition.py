"""Who holds which data: even silo splits by identity, and Hsu et al.'s Dirichlet client partitions."""
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
    num_classes = int(labels.max()) + 1
    p = np.bincount(labels, minlength=num_classes).astype(np.float64)
    if prior is not None:
        p = np.asarray(prior, dtype=np.float64)
        if p.shape != (num_classes,) or (p < 0).any() or p.sum() <= 0:
            raise ValueError(f"prior must be {num_classes} non-negative weights, got shape {p.shape}")
    p = p / p.sum()
    rng = np.random.default_rng(seed)
    pools = [rng.permutation(np.flatnonzero(labels == c)) for c in range(num_classes)]
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


def _one_class(rng, p, left, size) -> np.ndarray:
    enough = (left >= size) & (p > 0)
    weights = p * enough if enough.any() else p * (left == left.max())
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


def partition_hash(parts: Sequence[Sequence[int]]) -> str:
    """A short, order-sensitive fingerprint of index arrays, for the run log."""
    h = hashlib.sha256()
    for part in parts:
        arr = np.ascontiguousarray(np.asarray(part, dtype=np.int64))
        h.update(len(arr).to_bytes(8, "little"))
        h.update(arr.tobytes())
    return h.hexdigest()[:16]
