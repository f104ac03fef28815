"""FedFR's decoupled feature customisation (DFC, Liu et al. 2022; spec §4.3-3b, -4): a party's personal head on
the backbone's embedding f, which never leaves the party.

  f' = A f                  the converter: one Linear d -> d, the identity at the start, bias 0
  c_j = ŵ'_j · f̂'           cosine to the personal row v_j (the party's identities, V_k [n_k, d]; rows start as the
                            party's classifier rows W_k)
  g(x) = 2((x + 1)/2)^t − 1 (t = 3)
  z_j = r (g(c_j) − m) + b_j for the sample's own identity, r (g(c_j) + m) + b_j for every other (r = 30, m = 0.4)
  L_bce = mean over the batch of Σ_j [1{j=y} (λ/r) log(1 + e^{−z_j}) + 1{j≠y} ((1−λ)/r) log(1 + e^{z_j})]  (λ = 0.7)

A sample whose label is not one of the party's identities (FedFR's selected public images, labels n_k + u) is a
negative of every personal class. The authors' code adds 1e-8 inside the logarithm and computes it from e^z, which
overflows for large |z| in fp16; here log(1 + e^x) is logaddexp(0, x): exact and finite everywhere, its gradient
σ(x) exact too (torch's softplus returns x itself past x = 20, whose gradient 1 is off by e^{-x}).
The personal model is the party's backbone followed by A (features normalised when compared)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def g_power(cos: torch.Tensor, power: float) -> torch.Tensor:
    """g(x) = 2((x + 1)/2)^t − 1."""
    return 2 * ((cos + 1) / 2).pow(power) - 1


def dfc_logits(cos: torch.Tensor, labels: torch.Tensor, bias: torch.Tensor, scale: float, margin: float,
               power: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(z [b, n], positives [b, n] bool) from the cosines [b, n] to the personal rows; labels >= n are negatives
    of every class."""
    n = cos.shape[1]
    positives = labels[:, None] == torch.arange(n, device=cos.device)[None, :]
    g = g_power(cos, power)
    z = scale * torch.where(positives, g - margin, g + margin) + bias[None, :]
    return z, positives


def log1p_exp(x: torch.Tensor) -> torch.Tensor:
    """log(1 + e^x), exact in value and gradient for every finite x."""
    return torch.logaddexp(torch.zeros((), dtype=x.dtype, device=x.device), x)


def bce_loss(z: torch.Tensor, positives: torch.Tensor, scale: float, lam: float) -> torch.Tensor:
    """L_bce: the batch mean of each sample's sum over the personal classes."""
    terms = torch.where(positives, (lam / scale) * log1p_exp(-z), ((1 - lam) / scale) * log1p_exp(z))
    return terms.sum(dim=1).mean()


class PersonalHead(nn.Module):
    """A (converter), V_k (personal rows) and b (per-class bias) of one party."""

    def __init__(self, rows: torch.Tensor, scale: float = 30.0, margin: float = 0.4, lam: float = 0.7,
                 power: float = 3.0):
        super().__init__()
        classes, d = rows.shape
        self.converter = nn.Linear(d, d).to(rows.dtype)
        with torch.no_grad():
            self.converter.weight.copy_(torch.eye(d, dtype=rows.dtype))
            self.converter.bias.zero_()
        self.weight = nn.Parameter(rows.clone())
        self.bias = nn.Parameter(torch.zeros(classes, dtype=rows.dtype))
        self.scale, self.margin, self.lam, self.power = float(scale), float(margin), float(lam), float(power)

    def convert(self, embeddings: torch.Tensor) -> torch.Tensor:
        """f' = A f: the personal features (unnormalised)."""
        return self.converter(embeddings.to(self.weight.dtype))

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """L_bce of a batch."""
        with torch.autocast(device_type=embeddings.device.type, enabled=False):
            cos = F.linear(F.normalize(self.convert(embeddings), dim=1), F.normalize(self.weight, dim=1))
            z, positives = dfc_logits(cos, labels, self.bias, self.scale, self.margin, self.power)
            return bce_loss(z, positives, self.scale, self.lam)
