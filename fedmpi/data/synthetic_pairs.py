"""Synthetic verification pair sets shaped like LFW, CFP-FP, AgeDB-30, CALFW and CPLFW.

Ten folds laid out contiguously as in the real files, each fold its first half same-identity pairs, then
different-identity pairs, and each fold with its own identities. Every set has its own identities (seeded
by the set's name) and its own difficulty:
  lfw       mild pose, lighting and expression changes
  cfp_fp    one image frontal, the other in profile (60-80 degrees yaw)
  agedb_30  a large age gap inside every pair
  calfw     an age gap, and negatives chosen to look alike (same skin tone and hair)
  cplfw     large, independent poses, and look-alike negatives
"""
from __future__ import annotations

import zlib

import numpy as np

from .synthetic import (STYLES, _IDENTITY_FIELDS, _VIEW_FIELDS, identity_keys, identity_params,
                        identity_uniforms, render_chunked, view_params)

PAIR_SETS = ("lfw", "cfp_fp", "agedb_30", "calfw", "cplfw")
_LOOKALIKE_FIELDS = [_IDENTITY_FIELDS.index(f) for f in ("tone", "tint", "hair", "bald", "age0")]
_LOOKALIKE = {"calfw", "cplfw"}


def generate_pairs(name: str, pairs_per_fold: int, size: int, seed: int = 0, folds: int = 10):
    """(uint8 [2N, 3, S, S] images, bool [N] issame, uint64 identity keys) with N = folds * pairs_per_fold."""
    if name not in PAIR_SETS:
        raise ValueError(f"unknown synthetic validation set {name!r}: expected one of {', '.join(PAIR_SETS)}")
    if pairs_per_fold < 2:
        raise ValueError(f"val_pairs_per_fold must be >= 2, got {pairs_per_fold}")
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    n_same = pairs_per_fold // 2
    pool = max(2, n_same)
    keys = identity_keys(f"val:{name}", folds * pool, seed)
    uniforms = identity_uniforms(keys)
    first, second, same, lookalike_of = [], [], [], []
    for f in range(folds):
        members = np.arange(f * pool, (f + 1) * pool)
        for k in range(pairs_per_fold):
            i = members[k % pool]
            if k < n_same:
                first.append(i), second.append(i), same.append(True)
                continue
            if name in _LOOKALIKE:
                j = len(keys) + len(lookalike_of)  # a new person who looks like i (added below)
                lookalike_of.append(i)
            else:
                j = members[(k % pool + 1 + rng.integers(pool - 1)) % pool]
            first.append(i), second.append(j), same.append(False)
    extra_keys = identity_keys(f"val:{name}:lookalike", len(lookalike_of), seed)
    extra = identity_uniforms(extra_keys).reshape(len(lookalike_of), uniforms.shape[1])
    extra[:, _LOOKALIKE_FIELDS] = uniforms[lookalike_of][:, _LOOKALIKE_FIELDS]  # same skin, hair, age
    all_keys = np.concatenate([keys, extra_keys])
    all_uniforms = np.concatenate([uniforms, extra])
    who = np.stack([first, second], 1).reshape(-1)  # image 2p is pair p's first, 2p + 1 its second
    ident = {k: v[who] for k, v in identity_params(all_uniforms, STYLES["val"]).items()}
    view = view_params(rng.random((len(who), len(_VIEW_FIELDS))).astype(np.float32), STYLES["val"])
    _set_character(name, view, rng)
    images = render_chunked(ident, view, size)
    return images, np.asarray(same, dtype=bool), all_keys


def _set_character(name: str, view: dict, rng) -> None:
    """Overwrite the pose or age of each pair's two images with the set's characteristic change."""
    n_pairs = len(view["yaw"]) // 2
    a, b = slice(0, None, 2), slice(1, None, 2)
    sign = np.where(rng.random(n_pairs) < 0.5, -1.0, 1.0)
    if name == "cfp_fp":
        view["yaw"][a] = np.radians(4.0) * rng.standard_normal(n_pairs)
        view["yaw"][b] = sign * np.radians(rng.uniform(60, 80, n_pairs))
    elif name == "cplfw":
        view["yaw"][a] = np.radians(rng.uniform(-75, 75, n_pairs))
        view["yaw"][b] = np.radians(rng.uniform(-75, 75, n_pairs))
    elif name in ("agedb_30", "calfw"):
        low = rng.uniform(-0.6, 0.1, n_pairs)
        gap = rng.uniform(0.6, 1.0, n_pairs) if name == "agedb_30" else rng.uniform(0.4, 0.9, n_pairs)
        older_first = rng.random(n_pairs) < 0.5
        view["age"][a] = np.where(older_first, low + gap, low)
        view["age"][b] = np.where(older_first, low, low + gap)
