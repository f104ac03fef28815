"""ArcFace and CosFace margins on cosine logits, and the checks and logits both classifiers share
(`classifier.build_classifier` is the one entry point for the classifier).

Both heads work on cos θ between an L2-normalised embedding and an L2-normalised class centre; only the target
logit of each sample changes, then all logits are multiplied by the scale s:
  ArcFace: cos(θ + m) while θ + m < π, else cos θ − m·sin m: the linear continuation of insightface's
           `ArcFace` loss (easy_margin off), which keeps the target logit decreasing in θ past π − m.
           (insightface's newer `CombinedMarginLoss` applies cos(θ + m) under no_grad, a straight-through
           gradient without that continuation; here the gradient is the exact one of the formula above.)
  CosFace: cos θ − m.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

DEFAULT_MARGIN = {"arcface": 0.5, "cosface": 0.35}


class ArcFaceMargin:
    kind = "arcface"

    def __init__(self, scale: float = 64.0, margin: float = 0.5):
        self.scale = float(scale)
        self.margin = float(margin)
        self._cos_m = math.cos(margin)
        self._sin_m = math.sin(margin)
        self._threshold = math.cos(math.pi - margin)  # cos θ below this means θ + m > π
        self._linear_shift = math.sin(math.pi - margin) * margin

    def target(self, cos: torch.Tensor) -> torch.Tensor:
        # sin θ ≥ sqrt(eps) keeps the derivative finite when an embedding sits exactly on its centre
        eps = torch.finfo(cos.dtype).eps
        sin = torch.sqrt((1.0 - cos * cos).clamp_min(eps))
        cos_theta_plus_m = cos * self._cos_m - sin * self._sin_m
        return torch.where(cos > self._threshold, cos_theta_plus_m, cos - self._linear_shift)


class CosFaceMargin:
    kind = "cosface"

    def __init__(self, scale: float = 64.0, margin: float = 0.35):
        self.scale = float(scale)
        self.margin = float(margin)

    def target(self, cos: torch.Tensor) -> torch.Tensor:
        return cos - self.margin


def make_margin(kind: str, scale: float = 64.0, margin: float | None = None):
    if kind not in DEFAULT_MARGIN:
        raise ValueError(f"unknown classifier kind {kind!r}: expected 'arcface' or 'cosface'")
    margin = DEFAULT_MARGIN[kind] if margin is None else margin
    if not scale > 0:
        raise ValueError(f"classifier scale {scale!r} must be > 0")
    if not 0 <= margin < (math.pi / 2 if kind == "arcface" else 2.0):
        raise ValueError(f"{kind} margin {margin!r} out of range")
    return (ArcFaceMargin if kind == "arcface" else CosFaceMargin)(scale, margin)


def cosine_logits(embeddings: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:
    """cos θ between every embedding and every class centre, both L2-normalised: [b, rows]."""
    return F.linear(F.normalize(embeddings, dim=1), F.normalize(centres, dim=1)).clamp(-1.0, 1.0)


def margin_logits(cos: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, head) -> torch.Tensor:
    """s·cos with the margin applied at the (rows[i], cols[i]) target entries (out of place, differentiable)."""
    with_margin = cos.index_put((rows, cols), head.target(cos[rows, cols]))
    return with_margin * head.scale


def check_batch(embeddings: torch.Tensor, labels: torch.Tensor, embedding_size: int) -> torch.Tensor:
    """Shapes and dtype of one classifier input; returns the labels on the embeddings' device."""
    if embeddings.dim() != 2 or embeddings.shape[1] != embedding_size:
        raise ValueError(f"classifier expects embeddings of shape [batch, {embedding_size}], "
                         f"got {list(embeddings.shape)}")
    if labels.dim() != 1 or labels.shape[0] != embeddings.shape[0]:
        raise ValueError(f"classifier expects labels of shape [{embeddings.shape[0]}], got {list(labels.shape)}")
    if labels.dtype != torch.int64:
        raise ValueError(f"classifier labels must be torch.int64, got {labels.dtype}")
    return labels.to(embeddings.device)


def check_label_range(labels: torch.Tensor, num_classes: int) -> None:
    if labels.numel() and bool(((labels < 0) | (labels >= num_classes)).any()):
        bad = labels[(labels < 0) | (labels >= num_classes)][0].item()
        raise ValueError(f"label {bad} outside [0, {num_classes}) of the classifier")
