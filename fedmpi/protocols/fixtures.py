"""Synthetic IJB-B, IJB-C and MegaFace releases, written in exactly the official layouts (see ijb_meta.py and
megaface.py) from the synthetic face renderer, so the whole evaluation path runs without the real sets.

IJB: subjects with several templates each; a template holds 1-3 media of 1-2 images. Each face is rendered in
the canonical (aligned) frame, then placed into a larger "loose crop" by a random similarity transform; its
landmarks are that transform applied to the ArcFace template, so alignment recovers the rendered face. Pairs:
every same-subject template pair and randomly drawn different-subject pairs.
MegaFace: FaceScrub-like probe identities and distractors (aligned crops); a few probes show another person
and a few distractors show a probe identity, and the refined lists name exactly those.
Everything is a function of (size, seed): the same call writes the same files.
"""
from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import torch

from fedmpi.data.images import encode
from fedmpi.data.synthetic import (STYLES, _VIEW_FIELDS, identity_keys, identity_params, identity_uniforms,
                                   render_chunked, view_params)
from fedmpi.protocols.align import template, warp

IJB_FOLDERS = {"ijbb": "IJBB", "ijbc": "IJBC"}


def _faces(label: str, identities: int, who: np.ndarray, size: int, rng) -> np.ndarray:
    """uint8 [len(who), 3, size, size]: image i shows identity who[i] of a population named `label`."""
    keys = identity_keys(f"bench:{label}", identities)
    ident = {k: v[who] for k, v in identity_params(identity_uniforms(keys), STYLES["val"]).items()}
    view = view_params(rng.random((len(who), len(_VIEW_FIELDS))).astype(np.float32), STYLES["val"])
    return render_chunked(ident, view, size)


def _write_jpegs(folder: Path, names: list[str], images) -> None:
    for name, data in zip(names, encode([torch.as_tensor(im) for im in images])):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _loose_crop(face: np.ndarray, rng) -> tuple[torch.Tensor, np.ndarray]:
    """(loose crop, five landmarks in it): the face frame scaled, rotated and shifted into a larger canvas."""
    size = face.shape[-1]
    canvas = int(round(size * rng.uniform(1.8, 2.1)))
    angle, scale = np.radians(rng.uniform(-20, 20)), rng.uniform(0.8, 1.1)
    rotation = scale * np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    centre = (canvas - 1) / 2 + rng.uniform(-0.05, 0.05, 2) * canvas
    shift = centre - rotation @ np.full(2, (size - 1) / 2)
    matrix = np.concatenate([rotation, shift[:, None]], axis=1)
    landmarks = template(size) @ rotation.T + shift
    return warp(torch.from_numpy(face), matrix, canvas), landmarks


def write_ijb(root: Path, kind: str, size: int = 64, seed: int = 0, subjects: int = 50,
              templates_per_subject: int = 4, negatives: int = 2700) -> Path:
    """ROOT/meta/{kind}_*.txt and ROOT/loose_crop/*.jpg; returns ROOT."""
    rng = np.random.default_rng([seed, zlib.crc32(kind.encode())])
    root = Path(root)
    (root / "meta").mkdir(parents=True, exist_ok=True)
    rows, who = [], []   # (name, template, media) per image, subject per image
    template_subject, media_id = [], 0
    for subject in range(subjects):
        for _ in range(templates_per_subject):
            tid = len(template_subject) + 1
            template_subject.append(subject)
            for _ in range(rng.integers(1, 4)):
                media_id += 1
                for _ in range(rng.integers(1, 3)):
                    rows.append((f"{len(rows) + 1}.jpg", tid, media_id))
                    who.append(subject)
    faces = _faces(kind, subjects, np.array(who), size, rng)
    crops, lines = [], []
    for (name, _, _), face in zip(rows, faces):
        crop, points = _loose_crop(face, rng)
        crops.append(crop)
        lines.append(" ".join([name, *(f"{v:.3f}" for v in points.reshape(-1)), f"{rng.uniform(0.6, 1.0):.4f}"]))
    _write_jpegs(root / "loose_crop", [r[0] for r in rows], crops)
    (root / "meta" / f"{kind}_face_tid_mid.txt").write_text("".join(f"{n} {t} {m}\n" for n, t, m in rows))
    (root / "meta" / f"{kind}_name_5pts_score.txt").write_text("\n".join(lines) + "\n")
    subject_of = np.array(template_subject)
    pairs = [(a + 1, b + 1, 1) for a in range(len(subject_of)) for b in range(a + 1, len(subject_of))
             if subject_of[a] == subject_of[b]]
    while negatives > 0:
        a, b = rng.integers(len(subject_of), size=2)
        if subject_of[a] != subject_of[b]:
            pairs.append((int(a) + 1, int(b) + 1, 0))
            negatives -= 1
    order = rng.permutation(len(pairs))
    (root / "meta" / f"{kind}_template_pair_label.txt").write_text(
        "".join(f"{pairs[i][0]} {pairs[i][1]} {pairs[i][2]}\n" for i in order))
    return root


def write_megaface(root: Path, size: int = 64, seed: int = 0, identities: int = 20, images_per_identity: int = 6,
                   distractors: int = 1000, noisy_probes: int = 5, noisy_distractors: int = 20) -> Path:
    """ROOT/{facescrub,megaface}_lst, the refined lists and the two image folders; returns ROOT."""
    rng = np.random.default_rng([seed, zlib.crc32(b"megaface")])
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    probe_names, probe_who = [], []
    for i in range(identities):
        person = f"Person_{i:03d}"
        for k in range(images_per_identity):
            probe_names.append(f"{person}/{person}_{k + 1}.jpg")
            probe_who.append(i)
    probe_who = np.array(probe_who)
    mislabelled = rng.choice(len(probe_names), noisy_probes, replace=False)
    probe_who[mislabelled] = identities + np.arange(noisy_probes)     # someone who is not in FaceScrub
    n_total = distractors + noisy_distractors
    distractor_who = identities + noisy_probes + np.arange(n_total)
    noisy = rng.choice(n_total, noisy_distractors, replace=False)
    distractor_who[noisy] = rng.integers(identities, size=noisy_distractors)  # a FaceScrub identity
    distractor_names = [f"{k // 100:03d}/{k // 10:07d}@N00/{k}_0.jpg" for k in range(n_total)]
    population = identities + noisy_probes + n_total
    faces = _faces("megaface", population, np.concatenate([probe_who, distractor_who]), size, rng)
    _write_jpegs(root / "facescrub_images", probe_names, faces[:len(probe_names)])
    _write_jpegs(root / "megaface_images", distractor_names, faces[len(probe_names):])
    (root / "facescrub_lst").write_text("".join(f"{n}\n" for n in probe_names))
    (root / "megaface_lst").write_text("".join(f"{n}\n" for n in distractor_names))
    (root / "facescrub_noises.txt").write_text(
        "# probe images showing another person\n"
        + "".join(f"{Path(probe_names[i]).name}\n" for i in sorted(mislabelled)))
    (root / "megaface_noises.txt").write_text(
        "# distractors showing a FaceScrub identity\n" + "".join(f"{distractor_names[i]}\n" for i in sorted(noisy)))
    return root


def write_all(folder: Path, size: int = 64, seed: int = 0) -> dict[str, Path]:
    """{'ijbb': FOLDER/IJBB, 'ijbc': FOLDER/IJBC, 'megaface': FOLDER/megaface}, written."""
    folder = Path(folder)
    roots = {kind: write_ijb(folder / sub, kind, size, seed) for kind, sub in IJB_FOLDERS.items()}
    roots["megaface"] = write_megaface(folder / "megaface", size, seed)
    return roots
