"""IJB-B / IJB-C 1:1 template verification (insightface's protocol, Whitelam et al. 2017, Maze et al. 2018).

By default every choice follows insightface's evaluation (recognition/_evaluation_/ijb, ijb_11.py):
image feature     f(x) + f(flip x), x aligned by its five landmarks; NOT L2-normalised, so its norm weighs it
                  in the pooling (use_norm_score); times the image's detection score (use_detector_score)
media feature     mean of the features of the media's images inside one template
template feature  sum (= mean, up to scale) of its media features, L2-normalised
pair score        cosine of the two template features, scored in batches of bounded size
metrics           TAR at FAR 1e-6 ... 1e-1 read as insightface reads it (fedmpi.metrics.roc.nearest_points:
                  the ROC point of nearest FPR) and the ROC
Options name the other choices: keep_feature_norm=False (normalise each image feature first),
detection_weighting=False, tar_reading="strict" (the project's lowest threshold with at most floor(FAR * n)
false accepts).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fedmpi.metrics.roc import PAPER_FARS, TAR_READINGS, far_column, read_tar, roc_curve
from fedmpi.protocols.faces import FaceImages, embed_faces
from fedmpi.protocols.ijb_meta import read_ijb_meta

SCORE_BATCH_BYTES = 64 << 20  # the two gathered feature blocks of one batch of pairs


POOL_ROWS = 8192  # image features widened to float64 at a time while pooling


def pool_templates(features: torch.Tensor, templates, media, template_ids=None, weights=None) -> torch.Tensor:
    """[T, D] float64 L2-normalised template features, row t for template_ids[t] (default: the sorted distinct
    ids); image i's feature is multiplied by weights[i] when given. Sums run in float64."""
    templates, media = np.asarray(templates), np.asarray(media)
    template_ids = np.unique(templates) if template_ids is None else np.asarray(template_ids)
    template_of = np.searchsorted(template_ids, templates)
    keys, media_of = np.unique(np.stack([template_of, media], 1), axis=0, return_inverse=True)
    media_of = torch.from_numpy(media_of.reshape(-1))
    weights = None if weights is None else torch.as_tensor(np.asarray(weights), dtype=torch.float64)
    media_sum = torch.zeros(len(keys), features.shape[1], dtype=torch.float64)
    for start in range(0, len(features), POOL_ROWS):
        rows = slice(start, start + POOL_ROWS)
        block = features[rows].double()
        if weights is not None:
            block *= weights[rows, None]
        media_sum.index_add_(0, media_of[rows], block)
    media_mean = media_sum / torch.bincount(media_of, minlength=len(keys)).double()[:, None]
    owner = torch.from_numpy(keys[:, 0])
    template_sum = torch.zeros(len(template_ids), features.shape[1], dtype=torch.float64).index_add_(
        0, owner, media_mean)
    return torch.nn.functional.normalize(template_sum, dim=1)


def score_pairs(features, first, second, batch_bytes: int = SCORE_BATCH_BYTES) -> np.ndarray:
    """Cosine (float64) of rows first[i], second[i] of L2-normalised features; at most `batch_bytes` gathered.
    (numpy's take + einsum: several times faster than torch's indexing on CPU, bench/protocols.py.)"""
    features = features.numpy() if isinstance(features, torch.Tensor) else np.asarray(features)
    first, second = np.asarray(first), np.asarray(second)
    batch = max(1, batch_bytes // (2 * features.shape[1] * features.itemsize))
    scores = np.empty(len(first), np.float64)
    for start in range(0, len(first), batch):
        a, b = features[first[start:start + batch]], features[second[start:start + batch]]
        scores[start:start + batch] = np.einsum("ij,ij->i", a, b)
    return scores


class IJBProtocol:
    """One IJB release under ROOT; `evaluate(backbone)` -> {'tar_far_1e-6': ..., ..., 'tar_far_1e-1': ...}."""

    def __init__(self, root, kind: str, image_size: int, batch_size: int = 128, device="cpu", workers: int = 0,
                 detection_weighting: bool = True, keep_feature_norm: bool = True, tar_reading: str = "insightface",
                 cache_bytes: int = 0, fars=PAPER_FARS):
        if tar_reading not in TAR_READINGS:
            raise ValueError(f"unknown TAR reading {tar_reading!r}: expected one of {', '.join(TAR_READINGS)}")
        self.name, self.root = kind, Path(root)
        self.meta = read_ijb_meta(self.root, kind)
        self.faces = FaceImages(self.root / "loose_crop", self.meta.names, image_size, self.meta.landmarks,
                                cache_bytes)
        self.batch_size, self.device, self.workers = batch_size, device, workers
        self.detection_weighting, self.keep_feature_norm = detection_weighting, keep_feature_norm
        self.tar_reading, self.fars = tar_reading, tuple(fars)
        self.metric_names = [far_column(f) for f in self.fars]
        self.last: dict | None = None

    @property
    def settings(self) -> dict[str, str]:
        """The protocol's choices, as the report names them."""
        insightface = self.detection_weighting and self.keep_feature_norm and self.tar_reading == "insightface"
        return {"protocol": "insightface" if insightface else "custom",
                "image_features": "f(x)+f(flip x), norm kept" if self.keep_feature_norm
                else "f(x)+f(flip x), L2-normalised",
                "detection_score": "weights each image" if self.detection_weighting else "ignored",
                "tar_reading": ("insightface (nearest ROC point)" if self.tar_reading == "insightface"
                                else "strict (at most floor(FAR*n) false accepts)")}

    def describe(self) -> str:
        m = self.meta
        return (f"{self.name}: {len(m.names)} images, {len(m.template_ids)} templates, {len(m.same)} pairs "
                f"({int(m.same.sum())} genuine); " + ", ".join(f"{k}: {v}" for k, v in self.settings.items()))

    def pair_scores(self, backbone: torch.nn.Module) -> np.ndarray:
        features = embed_faces(backbone, self.faces, self.batch_size, self.device, self.workers,
                               normalize=not self.keep_feature_norm)
        weights = self.meta.detection.astype(np.float32) if self.detection_weighting else None
        templates = pool_templates(features, self.meta.templates, self.meta.media, self.meta.template_ids, weights)
        return score_pairs(templates, self.meta.first, self.meta.second)

    def evaluate(self, backbone: torch.nn.Module) -> dict[str, float]:
        """TAR at each FAR; NaN for a diverged backbone (a pair score not finite), whose ROC is not drawn."""
        scores = self.pair_scores(backbone)
        counts = {"images": len(self.meta.names), "templates": len(self.meta.template_ids), "pairs": len(scores),
                  "genuine": int(self.meta.same.sum())}
        if not np.isfinite(scores).all():
            metrics = {far_column(f): float("nan") for f in self.fars}
            self.last = {"metrics": metrics, "settings": self.settings, "counts": counts}
            return metrics
        points = read_tar(scores, self.meta.same, self.fars, self.tar_reading)
        metrics = {far_column(f): points[f]["tar"] for f in self.fars}
        self.last = {"metrics": metrics, "roc": roc_curve(scores, self.meta.same), "settings": self.settings,
                     "counts": counts}
        return metrics
