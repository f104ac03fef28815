"""`build_classifier`, the one entry point for a party's margin classifier: replicated or sharded over the party."""
from __future__ import annotations

import torch

from .heads import make_margin
from .replicated import ReplicatedClassifier
from .sharded import ShardedClassifier, group_size

MODES = ("auto", "replicated", "sharded")


def build_classifier(num_classes: int, embedding_size: int, kind: str = "arcface", scale: float = 64.0,
                     margin: float | None = None, group=None, mode: str = "auto", sample_rate: float = 1.0,
                     seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """The party's margin classifier: forward(embeddings [b, d], labels [b]) -> scalar loss.

    group: the party's torch.distributed process group, or None for a single rank.
    mode: 'auto' (sharded when the group has more than one rank, plain otherwise), 'replicated', 'sharded'.
    sample_rate < 1: partial-FC sampled negatives (sharded/plain only).
    The initial class centres depend only on `seed`, whatever the mode and the number of ranks.
    """
    if mode not in MODES:
        raise ValueError(f"unknown classifier mode {mode!r}: expected one of {', '.join(MODES)}")
    if not isinstance(num_classes, int) or num_classes <= 0:
        raise ValueError(f"num_classes {num_classes!r} must be a positive integer")
    if not isinstance(embedding_size, int) or embedding_size <= 0:
        raise ValueError(f"embedding_size {embedding_size!r} must be a positive integer")
    if not 0.0 < sample_rate <= 1.0:
        raise ValueError(f"sample_rate {sample_rate!r} must be in (0, 1]")
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"classifier dtype {dtype} must be torch.float32 or torch.float64")
    head = make_margin(kind, scale, margin)
    ranks = group_size(group)
    if mode == "replicated" and ranks > 1:
        if sample_rate < 1.0:
            raise ValueError("sample_rate < 1 needs the sharded classifier (mode 'sharded' or 'auto'), "
                             "not mode 'replicated'")
        return ReplicatedClassifier(num_classes, embedding_size, head, group, seed, dtype)
    return ShardedClassifier(num_classes, embedding_size, head, group if ranks > 1 else None,
                             sample_rate, seed, dtype)
