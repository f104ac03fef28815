"""The CIFAR-10 CNN of McMahan et al. (2017, "Communication-Efficient Learning of Deep Networks from
Decentralized Data", AISTATS; taken from the TensorFlow CIFAR-10 tutorial), the model Hsu, Qi and Brown (2019)
use for FedAvg/FedAvgM on CIFAR-10.

Layers (input 3 x 32 x 32; the tutorial's 24 x 24 crops are not used, as Hsu et al. train without augmentation):
  conv1   5x5, 3 -> 64, ReLU;   max-pool 3x3 stride 2 (SAME);   LRN (radius 4, bias 1, alpha 0.001/9, beta 0.75)
  conv2   5x5, 64 -> 64, ReLU;  LRN;                             max-pool 3x3 stride 2 (SAME)
  fc3     64*8*8 -> 384, ReLU
  fc4     384 -> 192, ReLU
  logits  192 -> 10
Parameters: 1,756,426 at 32 x 32 input (4,864 + 102,464 + 1,573,248 + 73,920 + 1,930); at the tutorial's
24 x 24 input it is the "about 10^6" McMahan et al. report (1,068,298).
"""
from __future__ import annotations

import torch
from torch import nn


class CifarCNN(nn.Module):
    def __init__(self, num_classes: int = 10, input_size: int = 32):
        super().__init__()
        # TF's LRN: b = a / (bias + alpha_tf * sum_{|d'-d|<=r} a^2)^beta; torch divides its alpha by size
        lrn = dict(size=9, alpha=0.001, beta=0.75, k=1.0)
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2, padding=1), nn.LocalResponseNorm(**lrn),
            nn.Conv2d(64, 64, 5, padding=2), nn.ReLU(), nn.LocalResponseNorm(**lrn), nn.MaxPool2d(3, 2, padding=1))
        side = (input_size + 3) // 4
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(64 * side * side, 384), nn.ReLU(), nn.Linear(384, 192), nn.ReLU(),
            nn.Linear(192, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))
