"""The model-contrastive term of FedFR (MOON-style; spec §4.3-4): the embedding f of the party's backbone is pulled
towards that of the round's global backbone φ_Θ and pushed from that of the party's previous-round backbone φ_prev,
both frozen, on the same batch:

  u = cos(f, φ_Θ(x)) / τ,  v = cos(f, φ_prev(x)) / τ,  L_con = mean of −log(e^u / (e^u + e^v)) = log(1 + e^{v−u})

(τ = 0.5; cosines of the raw features, torch's CosineSimilarity with eps 1e-8, as the authors' code)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from fedmpi.models.personal_head import log1p_exp


def model_contrastive(embeddings: torch.Tensor, global_features: torch.Tensor, previous_features: torch.Tensor,
                      tau: float) -> torch.Tensor:
    u = F.cosine_similarity(embeddings, global_features.to(embeddings.dtype), dim=1) / tau
    v = F.cosine_similarity(embeddings, previous_features.to(embeddings.dtype), dim=1) / tau
    return log1p_exp(v - u).mean()   # exact past 20, where softplus returns its argument (τ < 0.1)
