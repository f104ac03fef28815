"""Scores a backbone on pair-verification sets: the FV score (FV folds) and the evaluation (held-out folds).

A validator owns one Evaluator over its private sets. Each set is (images uint8 [2N, 3, H, W], issame bool [N]),
pairs laid out as consecutive images (2i, 2i+1) and folds contiguous, as in LFW-style .bin files.
Accuracies are fractions in [0, 1]. A diverged model (an embedding not finite, so a pair score NaN or infinite) is a
result, not an error: its held-out metrics on that set are NaN (`diverged`).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch

from .embed import embed_images, pair_scores
from .roc import tar_at_far, tar_key
from .verification import fold_slices, fv_accuracy, kfold_accuracy, split_fv_folds


def diverged(metrics: Mapping[str, float]) -> bool:
    """Whether held-out metrics are those of a diverged model (accuracy NaN)."""
    return metrics["accuracy"] != metrics["accuracy"]


class Evaluator:
    def __init__(self, sets: Mapping[str, tuple[torch.Tensor, np.ndarray]], fv_folds: str = "first",
                 batch_size: int = 128, device="cpu", fars: Sequence[float] = (1e-3, 1e-2),
                 n_folds: int = 10, thresholds=None, flip: bool = True):
        if not sets:
            raise ValueError("Evaluator needs at least one validation set")
        split_fv_folds(fv_folds, n_folds)  # validates the switch early
        self.sets = {}
        for name, (images, issame) in sets.items():
            if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8 or images.ndim != 4 \
                    or images.shape[1] != 3:
                raise ValueError(f"validation set {name!r}: images must be a uint8 tensor [2N, 3, H, W], got "
                                 f"{getattr(images, 'dtype', type(images))} {tuple(getattr(images, 'shape', ()))}")
            issame = np.asarray(issame)
            if issame.dtype != np.bool_ or issame.ndim != 1:
                raise ValueError(f"validation set {name!r}: issame must be a 1-D bool array, got {issame.dtype} "
                                 f"{issame.shape}")
            if len(images) != 2 * len(issame):
                raise ValueError(f"validation set {name!r}: {len(images)} images for {len(issame)} pairs "
                                 f"(expected {2 * len(issame)})")
            fold_slices(len(issame), n_folds)  # enough pairs for the folds
            self.sets[name] = (images, issame)
        self.fv_folds, self.n_folds, self.thresholds = fv_folds, n_folds, thresholds
        self.batch_size, self.device, self.fars = batch_size, device, tuple(float(f) for f in fars)
        self.flip = flip

    def pair_scores(self, backbone: torch.nn.Module) -> dict[str, np.ndarray]:
        """Cosine similarity of every pair of every set (flip-sum embeddings, or the images alone: flip=False)."""
        return {name: pair_scores(embed_images(backbone, images, self.batch_size, self.device, flip=self.flip))
                for name, (images, _) in self.sets.items()}

    def fv_scores(self, scores: Mapping[str, np.ndarray]) -> dict[str, float]:
        """FV score of each set from precomputed pair scores: mean accuracy over the FV folds."""
        return {name: fv_accuracy(scores[name], issame, self.fv_folds, self.n_folds, self.thresholds)["mean"]
                for name, (_, issame) in self.sets.items()}

    def heldout_metrics(self, scores: Mapping[str, np.ndarray]) -> dict[str, dict[str, float]]:
        """Held-out accuracy (mean, std over folds, threshold from the other 9) and TAR@FAR on held-out pairs;
        all NaN on a set where a score is not finite (the model diverged)."""
        return self.fold_metrics(scores, split_fv_folds(self.fv_folds, self.n_folds)[1])

    def fold_metrics(self, scores: Mapping[str, np.ndarray], held: Sequence[int]) -> dict[str, dict[str, float]]:
        """heldout_metrics over the folds `held` (all of them: insightface's 10-fold protocol)."""
        results = {}
        for name, (_, issame) in self.sets.items():
            if not np.isfinite(scores[name]).all():
                results[name] = {"accuracy": np.nan, "accuracy_std": np.nan,
                                 **{tar_key(far): np.nan for far in self.fars}}
                continue
            accuracy = kfold_accuracy(scores[name], issame, self.n_folds, eval_folds=held, thresholds=self.thresholds)
            slices = fold_slices(len(issame), self.n_folds)
            held_idx = np.concatenate([np.arange(slices[f].start, slices[f].stop) for f in held])
            metrics = {"accuracy": accuracy["mean"], "accuracy_std": accuracy["std"]}
            for far, point in tar_at_far(scores[name][held_idx], issame[held_idx], self.fars).items():
                metrics[tar_key(far)] = point["tar"]
            results[name] = metrics
        return results

    def score(self, backbone: torch.nn.Module) -> dict[str, float]:
        """The FV score per set (what a validator returns for a candidate backbone)."""
        return self.fv_scores(self.pair_scores(backbone))

    def evaluate(self, backbone: torch.nn.Module) -> dict[str, dict[str, float]]:
        """Held-out evaluation per set: accuracy, accuracy_std, tar@far=... ."""
        return self.heldout_metrics(self.pair_scores(backbone))
