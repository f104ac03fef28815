"""The model every client and the server hold, initialised identically on every rank from run.seed."""
from __future__ import annotations

import torch

from fedmpi.models.cifar_cnn import CifarCNN


def build_client_model(cfg, device, dtype) -> torch.nn.Module:
    torch.manual_seed(cfg.run.seed)
    return CifarCNN().to(device=device, dtype=dtype)
