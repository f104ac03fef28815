"""Membership inference. A threshold on a per-example (here per-identity) score separates members from
non-members to the extent the model overfits [Yeom et al., CSF 2018]; its ROC AUC over members and
non-members is the measure. At the level of identities an identity is scored by how compact its images are
under Θ: the mean pairwise cosine of their embeddings (members: the identities a party trained on).

Under (ε, δ)-DP every membership test satisfies FPR + e^ε·FNR ≥ 1 − δ and FNR + e^ε·FPR ≥ 1 − δ [Kairouz, Oh,
Viswanath, ICML 2015], i.e. TPR ≤ min(e^ε·FPR + δ, 1 − e^{−ε}(1 − δ − FPR))."""
from __future__ import annotations

import math

import numpy as np
import torch
from scipy.stats import rankdata

from .scoring import unit


def roc_auc(member_scores, nonmember_scores) -> float:
    """P(member score > non-member score) + ½ P(equal): the Mann-Whitney form of the ROC's area."""
    members, others = np.asarray(member_scores, float), np.asarray(nonmember_scores, float)
    if len(members) == 0 or len(others) == 0:
        raise ValueError(f"AUC needs members and non-members, got {len(members)} and {len(others)}")
    ranks = rankdata(np.concatenate([members, others]))
    return float((ranks[:len(members)].sum() - len(members) * (len(members) + 1) / 2)
                 / (len(members) * len(others)))


def compactness(embeddings: torch.Tensor) -> float:
    """Mean cosine over the distinct pairs of one identity's embeddings (at least two)."""
    if len(embeddings) < 2:
        raise ValueError(f"compactness needs at least 2 embeddings of the identity, got {len(embeddings)}")
    rows = unit(embeddings)
    gram = rows @ rows.T
    n = len(rows)
    return float((gram.sum() - gram.diagonal().sum()) / (n * (n - 1)))


def identity_scores(embeddings: torch.Tensor, identities) -> dict:
    """{identity: compactness of its embeddings} for every identity with at least two images."""
    identities = np.asarray(identities)
    return {ident: compactness(embeddings[torch.as_tensor(identities == ident)])
            for ident in np.unique(identities) if (identities == ident).sum() >= 2}


def membership_attack(embeddings: torch.Tensor, identities, members) -> dict:
    """AUC of the compactness threshold attack: identities in `members` against every other identity."""
    scores = identity_scores(embeddings, identities)
    members = set(members)
    inside = [s for ident, s in scores.items() if ident in members]
    outside = [s for ident, s in scores.items() if ident not in members]
    return {"auc": roc_auc(inside, outside), "members": len(inside), "nonmembers": len(outside)}


def dp_tpr_bound(fpr, epsilon: float, delta: float) -> np.ndarray:
    """The highest TPR any membership test can reach at each FPR under (ε, δ)-DP [KOV 2015]."""
    if epsilon < 0 or not 0 <= delta < 1:
        raise ValueError(f"(ε, δ) must have ε >= 0 and 0 <= δ < 1, got ({epsilon}, {delta})")
    fpr = np.asarray(fpr, float)
    bound = np.minimum(math.exp(epsilon) * fpr + delta, 1.0 - math.exp(-epsilon) * (1.0 - delta - fpr))
    return np.clip(bound, 0.0, 1.0)
