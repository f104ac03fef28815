"""The silo runs' shared model: the IResNet backbone a config names, the same on every rank."""
from __future__ import annotations

import torch

from fedmpi.models.iresnet import iresnet


def build_backbone(cfg, device, dtype) -> torch.nn.Module:
    """The shared model f(Theta), initialised identically on every rank from run.seed."""
    torch.manual_seed(cfg.run.seed)
    m = cfg.model
    net = iresnet(m.backbone, embedding_size=m.embedding_size, input_size=cfg.data.image_size,
                  width=m.width, dropout=m.dropout)
    return net.to(device=device, dtype=dtype)
