"""Who masks with whom. SecAgg: everyone with everyone. SecAgg+ (Bell et al.): a random k-regular Harary graph,
the ids shuffled onto a ring and each joined to its k/2 nearest on either side (spec §3; as Google's FCP and
Flower draw it). The server draws it and sends each participant its neighbours."""
from __future__ import annotations

import random


def full(participants: list[int]) -> dict[int, set[int]]:
    return {u: set(participants) - {u} for u in participants}


def harary(participants: list[int], degree: int, rng: random.Random) -> dict[int, set[int]]:
    """Each participant's k = `degree` neighbours (k even); k >= n - 1 gives the full graph."""
    n = len(participants)
    if degree >= n - 1:
        return full(participants)
    if degree < 2 or degree % 2:
        raise ValueError(f"the SecAgg+ degree k must be even and at least 2, got {degree}")
    ring = list(participants)
    rng.shuffle(ring)
    half = degree // 2
    return {u: {ring[(i + d) % n] for d in range(-half, half + 1) if d} for i, u in enumerate(ring)}


def default_threshold(holders: int) -> int:
    """t = a majority of the h = k + 1 that hold each participant's shares (its k neighbours and itself; h = n for
    SecAgg: ⌊n/2⌋ + 1, spec §3), never below 2 (t = 1 shares are the secret). Bell et al. size t from k: a t
    sized from n can exceed k + 1 and never be met."""
    return max(holders // 2 + 1, 2)
