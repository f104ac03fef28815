"""IJB-B / IJB-C 1:1 template verification (insightface's protocol, Whitelam et al. 2017, Maze et al. 2018).

image feature     normalize(f(x) + f(flip x)), x aligned by its five landmarks; optionally x its detection score
media feature     mean of the features of the media's images inside one template
template feature  mean of its media features, L2-normalised
pair score        cosine of the two template features, scored in batches of bounded size
metrics           TAR at FAR 1e-6 ... 1e-1 (fedmpi.metrics.roc) and the ROC
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fedmpi.metrics.roc import PAPER_FARS, far_column, roc_curve, tar_at_far
from fedmpi.protocols.faces import FaceImages, embed_faces
from fedmpi.protocols.ijb_meta import read_ijb_meta

SCORE_BATCH_BYTES = 64 << 20  # the two gathered feature blocks of one batch of pairs


def pool_templates(features: torch.Tensor, templates, media, template_ids=None) -> torch.Tensor:
    """[T, D] L2-normalised template features, row t for template_ids[t] (default: the sorted distinct ids)."""
    templates, media = np.asarray(templates), np.asarray(media)
    template_ids = np.unique(templates) if template_ids is None else np.asarray(template_ids)
    template_of = np.searchsorted(template_ids, templates)
    keys, media_of = np.unique(np.stack([template_of, media], 1), axis=0, return_inverse=True)
    media_of = torch.from_numpy(media_of.reshape(-1))
    media_sum = torch.zeros(len(keys), features.shape[1], dtype=features.dtype).index_add_(0, media_of, features)
    media_mean = media_sum / torch.bincount(media_of, minlength=len(keys)).to(features.dtype)[:, None]
    owner = torch.from_numpy(keys[:, 0])
    template_sum = torch.zeros(len(template_ids), features.shape[1], dtype=features.dtype).index_add_(
        0, owner, media_mean)
    template_mean = template_sum / torch.bincount(owner, minlength=len(template_ids)).to(features.dtype)[:, None]
    return torch.nn.functional.normalize(template_mean, dim=1)


def score_pairs(features, first, second, batch_bytes: int = SCORE_BATCH_BYTES) -> np.ndarray:
    """Cosine of rows first[i], second[i] of L2-normalised features; at most `batch_bytes` gathered at once.
    (numpy's take + einsum: several times faster than torch's indexing on CPU, bench/protocols.py.)"""
    features = features.numpy() if isinstance(features, torch.Tensor) else np.asarray(features)
    first, second = np.asarray(first), np.asarray(second)
    batch = max(1, batch_bytes // (2 * features.shape[1] * features.itemsize))
    scores = np.empty(len(first), np.float32)
    for start in range(0, len(first), batch):
        a, b = features[first[start:start + batch]], features[second[start:start + batch]]
        scores[start:start + batch] = np.einsum("ij,ij->i", a, b)
    return scores


class IJBProtocol:
    """One IJB release under ROOT; `evaluate(backbone)` -> {'tar_far_1e-6': ..., ..., 'tar_far_1e-1': ...}."""

    def __init__(self, root, kind: str, image_size: int, batch_size: int = 128, device="cpu", workers: int = 0,
                 detection_weighting: bool = False, cache_bytes: int = 0, fars=PAPER_FARS):
        self.name, self.root = kind, Path(root)
        self.meta = read_ijb_meta(self.root, kind)
        self.faces = FaceImages(self.root / "loose_crop", self.meta.names, image_size, self.meta.landmarks,
                                cache_bytes)
        self.batch_size, self.device, self.workers = batch_size, device, workers
        self.detection_weighting, self.fars = detection_weighting, tuple(fars)
        self.metric_names = [far_column(f) for f in self.fars]
        self.last: dict | None = None

    def describe(self) -> str:
        m = self.meta
        return (f"{self.name}: {len(m.names)} images, {len(m.template_ids)} templates, {len(m.same)} pairs "
                f"({int(m.same.sum())} genuine)")

    def pair_scores(self, backbone: torch.nn.Module) -> np.ndarray:
        features = embed_faces(backbone, self.faces, self.batch_size, self.device, self.workers)
        if self.detection_weighting:
            features = features * torch.from_numpy(self.meta.detection).to(features.dtype)[:, None]
        templates = pool_templates(features, self.meta.templates, self.meta.media, self.meta.template_ids)
        return score_pairs(templates, self.meta.first, self.meta.second)

    def evaluate(self, backbone: torch.nn.Module) -> dict[str, float]:
        scores = self.pair_scores(backbone)
        points = tar_at_far(scores, self.meta.same, self.fars)
        metrics = {far_column(f): points[f]["tar"] for f in self.fars}
        self.last = {"metrics": metrics, "roc": roc_curve(scores, self.meta.same),
                     "counts": {"images": len(self.meta.names), "templates": len(self.meta.template_ids),
                                "pairs": len(scores), "genuine": int(self.meta.same.sum())}}
        return metrics
