"""The personalised evaluation of FedFR (spec §4.5, from the authors' local_all.py, roc_cuda.py, local_1n.py),
scaled down: a party's personal model judged on its own identities among every party's.

The pool: every party's held-out images (data.heldout), the party's own first. With unit features f:
  1:1   pairs (i, j), i one of the party's own images, j any pool image after it (each pair once: the own
        images with each other and with every other party's); genuine when both show one identity. TAR at each
        FAR (the project's strict reading, metrics/roc.py; the code bins the cosines into 2001 bins and
        interpolates its ROC).
  1:N   gallery: per identity of the party, the mean of the unit features of its training images (not
        renormalised, as the code); queries: every pool image, scored by f · g. A query of the party's own
        identities is mated with its identity's entry (its genuine score), every other score is a non-mated one.
        At FAR x the threshold is the ceil(x Q)-th highest non-mated score (Q queries: the code's count), and
        TPIR is the share of the genuine scores above it."""
from __future__ import annotations

import math

import numpy as np

from fedmpi.metrics.roc import far_column, tar_at_far


def tpir_column(far: float) -> str:
    """Log column of a 1:N metric: 1e-2 -> 'tpir_far_1e-2'."""
    return "tpir" + far_column(far)[3:]


def personal_columns(fars) -> list[str]:
    return [*(far_column(f) for f in fars), *(tpir_column(f) for f in fars)]


def verification(features: np.ndarray, identities: np.ndarray, own: int, fars) -> dict[float, float]:
    """1:1 TAR at each FAR over the pairs (i < own, j > i) of the pool's unit features [N, d]."""
    features = np.asarray(features, dtype=np.float64)
    identities = np.asarray(identities)
    scores = features[:own] @ features.T
    i, j = np.nonzero(np.arange(features.shape[0])[None, :] > np.arange(own)[:, None])
    table = tar_at_far(scores[i, j], identities[i] == identities[j], fars)
    return {far: table[far]["tar"] for far in table}


def identification(queries: np.ndarray, mates: np.ndarray, gallery: np.ndarray, fars) -> dict[float, float]:
    """1:N TPIR at each FAR: queries [Q, d] (unit), mates [Q] (the gallery row of a query's identity, -1: none),
    gallery [G, d]."""
    scores = np.asarray(queries, dtype=np.float64) @ np.asarray(gallery, dtype=np.float64).T
    mates = np.asarray(mates)
    mated = np.flatnonzero(mates >= 0)
    genuine = scores[mated, mates[mated]]
    impostor = np.ones_like(scores, dtype=bool)
    impostor[mated, mates[mated]] = False
    negatives = np.sort(scores[impostor])[::-1]
    out = {}
    for far in fars:
        k = math.ceil(len(queries) * far)
        threshold = negatives[k - 1] if 0 < k <= len(negatives) else -np.inf
        out[float(far)] = float(np.mean(genuine > threshold)) if len(genuine) else float("nan")
    return out


def personal_metrics(pool: np.ndarray, pool_ids: np.ndarray, own: int, gallery: np.ndarray,
                     gallery_ids: np.ndarray, fars) -> dict[str, float]:
    """{column: value} of both protocols (columns: personal_columns(fars))."""
    one = verification(pool, pool_ids, own, fars)
    where = {int(identity): row for row, identity in enumerate(gallery_ids)}
    mates = np.array([where.get(int(identity), -1) for identity in pool_ids])
    many = identification(pool, mates, gallery, fars)
    return {**{far_column(f): one[float(f)] for f in fars}, **{tpir_column(f): many[float(f)] for f in fars}}
