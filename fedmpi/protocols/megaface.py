"""MegaFace challenge 1 (Kemelmacher-Shlizerman et al. 2016) with FaceScrub probes, in torch, no devkit binary.
The release's files: megaface_lists.py.

Refinement as insightface applies it (recognition/_evaluation_/megaface/remove_noises.py): a noisy probe's
feature is replaced by the normalised mean feature of its identity's clean probes; a noisy distractor stays in
the gallery but can never win (insightface appends a large extra dimension to its feature, so that its distance
to every probe is huge; here its score is -inf). `noisy_distractors="drop"` removes them from the list instead.
Gallery sizes: the devkit's subset lists where the release has them (megaface_lists.py), otherwise (fallback)
sizes 10, 100, ..., 10^6 as nested prefixes of a seeded permutation of the distractors; sizes beyond the
distractors at hand are NaN. Metrics: rank-1 identification (fedmpi.metrics.identification) at each size and at
the largest ('rank1'), and TAR at FAR = 1e-6 (the strict reading of fedmpi.metrics.roc) with genuine pairs =
same-identity probe pairs, impostor pairs = every probe x every distractor of the largest gallery.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from fedmpi.metrics.identification import genuine_scores, rank1_rates, scan_distractors
from fedmpi.metrics.roc import allowed_false_accepts, far_column, operating_points
from fedmpi.protocols.faces import FaceImages, embed_faces
from fedmpi.protocols.megaface_lists import (devkit_list_files, list_key, read_devkit_galleries, read_list,
                                             read_noises)

SIZES = tuple(10 ** k for k in range(1, 7))
FAR = 1e-6
METRICS = ("rank1", *(f"rank1_1e{k}" for k in range(1, 7)), far_column(FAR))
NOISY_DISTRACTORS = ("never_win", "drop")


class MegaFaceProtocol:
    """`evaluate(backbone)` -> {'rank1', 'rank1_1e1' ... 'rank1_1e6', 'tar_far_1e-6'}."""

    def __init__(self, root, image_size: int, batch_size: int = 128, device="cpu", workers: int = 0,
                 refined: bool = True, noisy_distractors: str = "never_win", cache_bytes: int = 0, seed: int = 0):
        if noisy_distractors not in NOISY_DISTRACTORS:
            raise ValueError(f"unknown noisy_distractors {noisy_distractors!r}: expected one of "
                             f"{', '.join(NOISY_DISTRACTORS)}")
        self.name, self.root = "megaface", Path(root)
        probes = read_list(self.root / "facescrub_lst", 2, "IDENTITY/FILE (FaceScrub probe)")
        distractors = read_list(self.root / "megaface_lst", 3, "A/B/FILE (MegaFace distractor)")
        self.noisy_probes = np.zeros(len(probes), bool)
        noisy = np.zeros(len(distractors), bool)
        if refined:
            noise = {list_key(n, 1) for n in read_noises(self.root / "facescrub_noises.txt", False)}
            self.noisy_probes = np.array([list_key(p, 1) in noise for p in probes])
            noise = {list_key(n, 3) for n in read_noises(self.root / "megaface_noises.txt", True)}
            noisy = np.array([list_key(d, 3) in noise for d in distractors])
        self.noisy_distractors = noisy_distractors if refined else "none listed"
        self.identities = np.unique([Path(p).parts[-2] for p in probes], return_inverse=True)[1].reshape(-1)
        clean = np.bincount(self.identities[~self.noisy_probes], minlength=self.identities.max() + 1)
        self.keep = clean[self.identities] > 0   # a probe whose identity has no clean image cannot be refined
        dropped = noisy if noisy_distractors == "drop" else np.zeros(len(distractors), bool)
        lists = devkit_list_files(self.root)
        if lists:
            self.gallery_source = "devkit subset lists"
            galleries = {n: [i for i in g if not dropped[i]]
                         for n, g in read_devkit_galleries(lists, distractors).items()}
            used = np.unique(np.concatenate([np.asarray(g, np.int64) for g in galleries.values()]))
            position = np.full(len(distractors), -1)
            position[used] = np.arange(len(used))
            self.sizes = list(galleries)
            self.galleries = [position[np.asarray(g, np.int64)] for g in galleries.values()]
        else:
            self.gallery_source = "seeded prefixes (no devkit subset lists)"
            kept = np.flatnonzero(~dropped)
            used = kept[np.random.default_rng(seed).permutation(len(kept))]
            self.sizes = [n for n in SIZES if n <= len(used)]
            if not self.sizes:
                raise ValueError(f"{self.root / 'megaface_lst'}: {len(used)} distractors after refinement, "
                                 f"at least {SIZES[0]} needed")
            used, self.galleries = used[:self.sizes[-1]], None
        self.never_win = noisy[used]
        self.probes = FaceImages(self.root / "facescrub_images", probes, image_size, cache_bytes=cache_bytes)
        self.distractors = FaceImages(self.root / "megaface_images", [distractors[i] for i in used], image_size,
                                      cache_bytes=cache_bytes)
        self.batch_size, self.device, self.workers = batch_size, device, workers
        self.metric_names = list(METRICS)
        self.last: dict | None = None

    @property
    def settings(self) -> dict[str, str]:
        """The protocol's choices, as the report names them."""
        return {"noisy_distractors": {"never_win": "kept, never win (insightface)", "drop": "dropped"}.get(
                    self.noisy_distractors, self.noisy_distractors),
                "gallery": self.gallery_source, "tar_reading": "strict (at most floor(FAR*n) false accepts)"}

    def describe(self) -> str:
        return (f"megaface: {int(self.keep.sum())} probes of {self.identities.max() + 1} identities "
                f"({int(self.noisy_probes.sum())} refined), {len(self.distractors)} distractors "
                f"({int(self.never_win.sum())} noisy); "
                + ", ".join(f"{k}: {v}" for k, v in self.settings.items()))

    def probe_features(self, backbone) -> tuple[torch.Tensor, np.ndarray]:
        features = embed_faces(backbone, self.probes, self.batch_size, self.device, self.workers)
        for identity in np.unique(self.identities[self.noisy_probes & self.keep]):
            clean = (self.identities == identity) & ~self.noisy_probes
            centre = torch.nn.functional.normalize(features[torch.from_numpy(clean)].mean(0), dim=0)
            features[torch.from_numpy((self.identities == identity) & self.noisy_probes)] = centre
        return features[torch.from_numpy(self.keep)], self.identities[self.keep]

    def evaluate(self, backbone: torch.nn.Module) -> dict[str, float]:
        """Rank-1 per gallery size and TAR at FAR 1e-6; NaN for a diverged backbone (a feature not finite)."""
        probes, labels = self.probe_features(backbone)
        distractors = embed_faces(backbone, self.distractors, self.batch_size, self.device, self.workers)
        if not (torch.isfinite(torch.as_tensor(probes)).all() and torch.isfinite(torch.as_tensor(distractors)).all()):
            self.last = {"metrics": dict.fromkeys(METRICS, math.nan), "settings": self.settings}
            return dict.fromkeys(METRICS, math.nan)
        largest = np.arange(len(distractors)) if self.galleries is None else self.galleries[-1]
        n_negatives = len(probes) * len(largest)
        keep_top = min(allowed_false_accepts(FAR, n_negatives) + 1, n_negatives)
        maxima, top = scan_distractors(probes, distractors, self.sizes, keep_top, galleries=self.galleries,
                                       never_win=self.never_win)
        first, second, genuine = genuine_scores(probes, labels)
        rank1 = rank1_rates(first, genuine, maxima, self.sizes)
        metrics = {f"rank1_1e{k}": rank1.get(10 ** k, math.nan) for k in range(1, 7)}
        metrics["rank1"] = rank1[self.sizes[-1]]
        unordered = first < second
        positives = np.sort(genuine[torch.from_numpy(unordered)].numpy().astype(np.float64))
        point = operating_points(positives, top.numpy().astype(np.float64), n_negatives, [FAR])[FAR]
        metrics[far_column(FAR)] = point["tar"]
        self.last = {"metrics": metrics, "rank1": rank1, "settings": self.settings,
                     "counts": {"probes": len(probes), "identities": int(len(np.unique(labels))),
                                "distractors": len(largest), "noisy_distractors": int(self.never_win[largest].sum()),
                                "genuine": len(positives), "impostor": n_negatives}}
        return {k: metrics[k] for k in METRICS}
