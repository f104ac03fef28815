"""Extra negative "classes" that are cones on the sphere (PrivacyFace's consensus-aware loss, spec §3.4): a cone of
centre p and angular radius α adds the logit s·cos(max(φ − α, 0)) to every sample's softmax, φ = arccos(p·f̂),
the angle to the cone's edge, so features are pushed out of the whole region another party's identities occupy
(inside the cone the logit saturates at s). The cones are constants: their gradient goes to the features only.

Cones travel as rows [p (d) | α | valid] (fedmpi/algorithms/dplc.py); rows whose last value is 0 hold none."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .heads import cosine_logits, margin_logits


def valid_cones(rows: torch.Tensor | None) -> torch.Tensor | None:
    """The rows that hold a cone, or None when there are none."""
    if rows is None or rows.numel() == 0:
        return None
    kept = rows[rows[:, -1] > 0]
    return kept if kept.shape[0] else None


def cone_logits(unit_features: torch.Tensor, cones: torch.Tensor, scale: float) -> torch.Tensor:
    """s·cos(max(φ_q − α_q, 0)) [b, Q] for unit features [b, d] and cones [Q, d + 2]: cos(φ − α) written as
    cos φ cos α + sin φ sin α (sin φ ≥ √eps keeps its derivative finite), and 1 inside the cone."""
    d = unit_features.shape[1]
    centres = torch.nn.functional.normalize(cones[:, :d].to(unit_features.dtype), dim=1)
    alpha = cones[:, d].to(unit_features.dtype)
    cos = (unit_features @ centres.T).clamp(-1.0, 1.0)
    eps = torch.finfo(cos.dtype).eps
    sin = torch.sqrt((1.0 - cos * cos).clamp_min(eps))
    edge = cos * torch.cos(alpha) + sin * torch.sin(alpha)
    return scale * torch.where(cos >= torch.cos(alpha), torch.ones_like(cos), edge)


def consensus_aware_loss(embeddings: torch.Tensor, centres: torch.Tensor, labels: torch.Tensor, head,
                         cones: torch.Tensor | None) -> torch.Tensor:
    """Spec §3.4's L, mean over the batch, for one holder of its own class centres [n, d] (a device's album): the
    target's margin logit s·ψ(θ_y) against s·cos θ_j of its other rows and one cone logit per valid cone [Q, d + 2]
    (None: the plain margin softmax). Gradients reach the embeddings and the centres; the cones are constants."""
    logits = margin_logits(cosine_logits(embeddings, centres), torch.arange(labels.shape[0], device=labels.device),
                           labels, head)
    if cones is not None:
        logits = torch.cat([logits, cone_logits(F.normalize(embeddings, dim=1), cones.detach(), head.scale)], dim=1)
    return F.cross_entropy(logits, labels)
