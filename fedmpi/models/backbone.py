"""The runs' shared model f(Θ), the same on every rank: the IResNet a config names (the silo parties), or
McMahan et al.'s CIFAR CNN (the cross-device clients)."""
from __future__ import annotations

import torch

from fedmpi.models.iresnet import iresnet


def build_backbone(cfg, device, dtype, seed: int | None = None) -> torch.nn.Module:
    """The IResNet of model.*, initialised identically on every rank from run.seed (or `seed`)."""
    torch.manual_seed(cfg.run.seed if seed is None else seed)
    m = cfg.model
    net = iresnet(m.backbone, embedding_size=m.embedding_size, input_size=cfg.data.image_size,
                  width=m.width, dropout=m.dropout)
    return net.to(device=device, dtype=dtype)


def build_client_model(cfg, device, dtype) -> torch.nn.Module:
    """The CIFAR CNN every virtual client and the server hold, initialised identically from run.seed."""
    from fedmpi.models.cifar_cnn import CifarCNN

    torch.manual_seed(cfg.run.seed)
    return CifarCNN().to(device=device, dtype=dtype)
