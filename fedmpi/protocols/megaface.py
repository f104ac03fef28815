"""MegaFace challenge 1 (Kemelmacher-Shlizerman et al. 2016) with FaceScrub probes, in torch, no devkit binary.

Layout (insightface's MegaFace test pack):
  ROOT/facescrub_lst        one probe image per line, relative to facescrub_images/: .../IDENTITY/FILE
  ROOT/megaface_lst         one distractor per line, relative to megaface_images/: .../A/B/FILE
  ROOT/facescrub_noises.txt insightface's refined list: '#' comments, then FaceScrub file names (FILE) that
                            show another person
  ROOT/megaface_noises.txt  '#' comments, then distractor paths (A/B/FILE; a tab-separated line: the 2nd field)
                            that show a FaceScrub identity
  ROOT/facescrub_images/, ROOT/megaface_images/   aligned crops

Refinement as insightface applies it: a noisy probe's feature is replaced by the mean feature of its identity's
clean probes, a noisy distractor is removed. Gallery sizes 10, 100, ..., 10^6 are nested prefixes of a
seeded permutation of the (clean) distractors; sizes beyond the distractors at hand are NaN. Metrics: rank-1
identification (fedmpi.metrics.identification) at each size and at the largest ('rank1'), and TAR at
FAR = 1e-6 with genuine pairs = same-identity probe pairs, impostor pairs = every probe x every distractor.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from fedmpi.metrics.identification import genuine_scores, rank1_rates, scan_distractors
from fedmpi.metrics.roc import allowed_false_accepts, far_column, operating_points
from fedmpi.protocols.faces import FaceImages, embed_faces
from fedmpi.protocols.tables import LineError, read_rows, require_file

SIZES = tuple(10 ** k for k in range(1, 7))
FAR = 1e-6
METRICS = ("rank1", *(f"rank1_1e{k}" for k in range(1, 7)), far_column(FAR))


def read_list(path: Path, depth: int, what: str) -> list[str]:
    """The lines of a list file; each a relative path ending in `depth` parts (IDENTITY/FILE, A/B/FILE)."""
    names = []
    for number, (name,) in read_rows(path, 1, what):
        if len(Path(name).parts) < depth:
            raise LineError(path, number, f"{name!r}: expected a path ending in {what}")
        names.append(name)
    if not names:
        raise LineError(path, 1, f"empty list ({what})")
    return names


def read_noises(path: Path, column_tab: bool) -> set[str]:
    require_file(path, "MegaFace refined list")
    noises = set()
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        fields = line.strip().split("\t")
        noises.add(fields[1] if column_tab and len(fields) > 1 else fields[0].strip())
    return noises


def _key(name: str, depth: int) -> str:
    """The last `depth` parts of a path without the file extension (lists and refined lists are matched on it)."""
    return str(Path(*Path(name).parts[-depth:]).with_suffix(""))


class MegaFaceProtocol:
    """`evaluate(backbone)` -> {'rank1', 'rank1_1e1' ... 'rank1_1e6', 'tar_far_1e-6'}."""

    def __init__(self, root, image_size: int, batch_size: int = 128, device="cpu", workers: int = 0,
                 refined: bool = True, cache_bytes: int = 0, seed: int = 0):
        self.name, self.root = "megaface", Path(root)
        probes = read_list(self.root / "facescrub_lst", 2, "IDENTITY/FILE (FaceScrub probe)")
        distractors = read_list(self.root / "megaface_lst", 3, "A/B/FILE (MegaFace distractor)")
        self.noisy_probes = np.zeros(len(probes), bool)
        if refined:
            noise = {_key(n, 1) for n in read_noises(self.root / "facescrub_noises.txt", False)}
            self.noisy_probes = np.array([_key(p, 1) in noise for p in probes])
            noise = {_key(n, 3) for n in read_noises(self.root / "megaface_noises.txt", True)}
            distractors = [d for d in distractors if _key(d, 3) not in noise]
        order = np.random.default_rng(seed).permutation(len(distractors))
        distractors = [distractors[i] for i in order]
        self.identities = np.unique([Path(p).parts[-2] for p in probes], return_inverse=True)[1].reshape(-1)
        clean = np.bincount(self.identities[~self.noisy_probes], minlength=self.identities.max() + 1)
        self.keep = clean[self.identities] > 0   # a probe whose identity has no clean image cannot be refined
        self.sizes = [n for n in SIZES if n <= len(distractors)]
        if not self.sizes:
            raise ValueError(f"{self.root / 'megaface_lst'}: {len(distractors)} distractors after refinement, "
                             f"at least {SIZES[0]} needed")
        self.probes = FaceImages(self.root / "facescrub_images", probes, image_size, cache_bytes=cache_bytes)
        self.distractors = FaceImages(self.root / "megaface_images", distractors[:self.sizes[-1]], image_size,
                                      cache_bytes=cache_bytes)
        self.batch_size, self.device, self.workers = batch_size, device, workers
        self.metric_names = list(METRICS)
        self.last: dict | None = None

    def describe(self) -> str:
        return (f"megaface: {int(self.keep.sum())} probes of {self.identities.max() + 1} identities "
                f"({int(self.noisy_probes.sum())} refined), {len(self.distractors)} distractors")

    def probe_features(self, backbone) -> tuple[torch.Tensor, np.ndarray]:
        features = embed_faces(backbone, self.probes, self.batch_size, self.device, self.workers)
        for identity in np.unique(self.identities[self.noisy_probes & self.keep]):
            clean = (self.identities == identity) & ~self.noisy_probes
            centre = torch.nn.functional.normalize(features[torch.from_numpy(clean)].mean(0), dim=0)
            features[torch.from_numpy((self.identities == identity) & self.noisy_probes)] = centre
        return features[torch.from_numpy(self.keep)], self.identities[self.keep]

    def evaluate(self, backbone: torch.nn.Module) -> dict[str, float]:
        probes, labels = self.probe_features(backbone)
        distractors = embed_faces(backbone, self.distractors, self.batch_size, self.device, self.workers)
        n_negatives = len(probes) * len(distractors)
        keep_top = min(allowed_false_accepts(FAR, n_negatives) + 1, n_negatives)
        maxima, top = scan_distractors(probes, distractors, self.sizes, keep_top)
        first, second, genuine = genuine_scores(probes, labels)
        rank1 = rank1_rates(first, genuine, maxima, self.sizes)
        metrics = {f"rank1_1e{k}": rank1.get(10 ** k, math.nan) for k in range(1, 7)}
        metrics["rank1"] = rank1[self.sizes[-1]]
        unordered = first < second
        positives = np.sort(genuine[torch.from_numpy(unordered)].numpy().astype(np.float64))
        point = operating_points(positives, top.numpy().astype(np.float64), n_negatives, [FAR])[FAR]
        metrics[far_column(FAR)] = point["tar"]
        self.last = {"metrics": metrics, "rank1": rank1,
                     "counts": {"probes": len(probes), "identities": int(len(np.unique(labels))),
                                "distractors": len(distractors), "genuine": len(positives),
                                "impostor": n_negatives}}
        return {k: metrics[k] for k in METRICS}
