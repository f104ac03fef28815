"""Open-set identification against distractors, MegaFace style (Kemelmacher-Shlizerman et al. 2016).

For each probe image p and each other image q of the same identity, q is put into a gallery with the first N
distractors and p searches it: the search is a rank-1 hit when s(p, q) > max over those distractors of s(p, d)
(a tie with a distractor counts as a miss). Rank-1 accuracy at gallery size N is the hit rate over all such
ordered (p, q) pairs. Scores are dot products of the given (L2-normalised) features.

One pass over the distractors (in chunks, bounded memory) yields, for every probe, the maximum over each gallery
(nested prefixes, or any subsets such as the MegaFace devkit's lists), and the highest probe-distractor scores of
the largest gallery kept for TAR@FAR (fedmpi.metrics.roc.threshold_at_far).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch


def same_identity_pairs(labels) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair (p, q), p != q, of probes with the same label: two index arrays."""
    labels = np.asarray(labels)
    order = np.argsort(labels, kind="stable")
    sorted_labels = labels[order]
    starts = np.flatnonzero(np.r_[True, sorted_labels[1:] != sorted_labels[:-1]])
    ends = np.r_[starts[1:], len(labels)]
    first, second = [], []
    for s, e in zip(starts, ends):
        members = order[s:e]
        a, b = np.meshgrid(members, members, indexing="ij")
        off = a != b
        first.append(a[off]), second.append(b[off])
    if not first:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(first).astype(np.int64), np.concatenate(second).astype(np.int64)


def scan_distractors(probes: torch.Tensor, distractors: torch.Tensor, sizes: Sequence[int], keep_top: int = 0,
                     chunk: int | None = None, galleries: Sequence[np.ndarray] | None = None,
                     never_win: np.ndarray | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(max score of each probe over each gallery [len(sizes), P], the `keep_top` highest probe-distractor
    scores over the largest gallery, descending). Gallery k is the first sizes[k] distractors, or, when
    `galleries` is given, the distractors at indices galleries[k] (sizes[k] of them). A distractor marked in
    `never_win` stays in its galleries with score -inf (insightface's way with MegaFace's noisy distractors).
    A chunk of distractors is scored at a time: by default as many as make 2^26 scores (256 MB in float32)."""
    chunk = chunk or max(1, (1 << 26) // max(1, len(probes)))
    sizes = [int(n) for n in sizes]
    if galleries is None:
        if sorted(sizes) != sizes or not sizes or sizes[0] < 1 or sizes[-1] > len(distractors):
            raise ValueError(f"gallery sizes must be increasing within 1..{len(distractors)}, got {sizes}")
        members = np.arange(sizes[-1])[None, :] < np.array(sizes)[:, None]
    else:
        members = np.zeros((len(galleries), len(distractors)), bool)
        for k, index in enumerate(galleries):
            members[k, np.asarray(index)] = True
    members = torch.from_numpy(members)
    barred = None if never_win is None else torch.from_numpy(np.asarray(never_win, bool))
    maxima = torch.full((len(sizes), len(probes)), -torch.inf, dtype=probes.dtype)
    top = torch.empty(0, dtype=probes.dtype)
    for start in range(0, members.shape[1], chunk):
        stop = min(start + chunk, members.shape[1])
        block = probes @ distractors[start:stop].T
        if barred is not None:
            block[:, barred[start:stop]] = -torch.inf
        for k in range(len(sizes)):
            inside = members[k, start:stop]
            if inside.all():
                maxima[k] = torch.maximum(maxima[k], block.max(dim=1).values)
            elif inside.any():
                maxima[k] = torch.maximum(maxima[k], block[:, inside].max(dim=1).values)
        if keep_top:
            top = torch.cat([top, block[:, members[-1, start:stop]].reshape(-1)])
            top = torch.topk(top, min(keep_top, len(top))).values
    return maxima, top


def genuine_scores(probes: torch.Tensor, labels) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
    """(first, second, s(first, second)) over every ordered same-identity probe pair."""
    first, second = same_identity_pairs(labels)
    if len(first) == 0:
        raise ValueError("rank-1 identification needs an identity with at least two probe images")
    return first, second, (probes[first] * probes[second]).sum(dim=1)


def rank1_rates(first: np.ndarray, genuine: torch.Tensor, maxima: torch.Tensor, sizes) -> dict[int, float]:
    """{N: fraction of pairs whose genuine score beats the probe's best of the first N distractors}."""
    return {int(n): float((genuine > maxima[k][first]).double().mean()) for k, n in enumerate(sizes)}


def rank1_at_sizes(probes: torch.Tensor, labels, distractors: torch.Tensor, sizes: Sequence[int],
                   chunk: int | None = None) -> dict[int, float]:
    """{N: rank-1 identification rate with N distractors} (module docstring)."""
    first, _, genuine = genuine_scores(probes, labels)
    maxima, _ = scan_distractors(probes, distractors, sizes, 0, chunk)
    return rank1_rates(first, genuine, maxima, sizes)
