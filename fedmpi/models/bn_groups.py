"""BatchNorm over fixed groups of a rank's batch (`model.bn_batch`), so that the statistics a training step
normalises with do not depend on how a party's batch is split over its ranks.

A party step reads positions [kG, (k+1)G) of the party's stream, rank r of w the positions kG + j*w + r
(data/sampler.py). With groups of g images, a rank of b images holds b/g groups, its group c being its images
j = c, c + b/g, ...; that is the party's group q = c*w + r, the positions kG + q + a*(G/g). The same images in
the same order, whatever w: 2 ranks x 32 and 1 rank x 64 with g = 32 normalise the same two sets of 32.
The running statistics follow group 0 only: of a multi-rank party, only the leader's (rank 0, group 0) reach Θ.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _GroupedBatchNorm:
    groups = 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.groups == 1:
            return super().forward(x)
        g = self.groups
        if x.shape[0] % g:
            raise ValueError(f"a batch of {x.shape[0]} images does not split into {g} BatchNorm groups")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        parts = x.unflatten(0, (x.shape[0] // g, g))      # group c = parts[:, c]
        out = [F.batch_norm(parts[:, c], self.running_mean if c == 0 else None,
                            self.running_var if c == 0 else None, self.weight, self.bias, True, factor, self.eps)
               for c in range(g)]
        return torch.stack(out, dim=1).flatten(0, 1)


class GroupedBatchNorm1d(_GroupedBatchNorm, nn.BatchNorm1d):
    pass


class GroupedBatchNorm2d(_GroupedBatchNorm, nn.BatchNorm2d):
    pass


GROUPED = {nn.BatchNorm1d: GroupedBatchNorm1d, nn.BatchNorm2d: GroupedBatchNorm2d}


def normalise_in_groups(model: nn.Module, rank_batch: int, bn_batch: int) -> None:
    """Make every BatchNorm layer of `model` normalise its training batch of `rank_batch` images in groups of
    `bn_batch` (0, or the whole batch: plain BatchNorm, untouched). Parameters, buffers and keys are kept."""
    if not bn_batch or bn_batch == rank_batch:
        return
    if rank_batch % bn_batch:
        raise ValueError(f"{rank_batch} images per rank are not a multiple of model.bn_batch={bn_batch}")
    for module in model.modules():
        grouped = GROUPED.get(type(module))
        if grouped is not None:
            module.__class__ = grouped
            module.groups = rank_batch // bn_batch
