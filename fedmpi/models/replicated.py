"""Replicated margin classifier: every rank of the party holds all class centres (data-parallel).

Each rank returns the mean loss over its own samples; `sync_grads()` (after backward) averages the centres'
gradient over the group, which is ∂L/∂W of the party-wide mean loss L when ranks hold equal batches.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .class_centres import init_class_centres
from .cone_negatives import cone_logits
from .heads import check_batch, check_label_range, cosine_logits, margin_logits


class ReplicatedClassifier(nn.Module):
    def __init__(self, num_classes: int, embedding_size: int, head, group, seed: int = 0,
                 dtype: torch.dtype = torch.float32):
        super().__init__()
        if dist.get_rank(group) < 0:
            raise ValueError("this rank is not a member of the classifier's process group")
        self.group, self.ranks = group, dist.get_world_size(group)
        self.head, self.num_classes, self.embedding_size = head, num_classes, embedding_size
        self.class_start, self.class_end = 0, num_classes
        self.weight = nn.Parameter(init_class_centres(seed, 0, num_classes, embedding_size, dtype))
        self.negatives: torch.Tensor | None = None   # extra negative cones [Q, d + 2] (models/cone_negatives.py)

    def extra_repr(self) -> str:
        return (f"{self.head.kind} s={self.head.scale} m={self.head.margin}, {self.num_classes} classes "
                f"replicated on {self.ranks} ranks")

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        labels = check_batch(embeddings, labels, self.embedding_size)
        check_label_range(labels, self.num_classes)
        with torch.autocast(device_type=embeddings.device.type, enabled=False):
            cos = cosine_logits(embeddings.to(self.weight.dtype), self.weight)
            rows = torch.arange(labels.shape[0], device=labels.device)
            logits = margin_logits(cos, rows, labels, self.head)
            if self.negatives is not None:
                unit = F.normalize(embeddings.to(self.weight.dtype), dim=1)
                logits = torch.cat([logits, cone_logits(unit, self.negatives, self.head.scale)], dim=1)
            return F.cross_entropy(logits, labels)

    def sync_grads(self) -> None:
        """Average the class centres' gradient over the party (every rank must call it, after backward)."""
        if self.weight.grad is None:
            self.weight.grad = torch.zeros_like(self.weight)
        dist.all_reduce(self.weight.grad, group=self.group)
        self.weight.grad.div_(self.ranks)
