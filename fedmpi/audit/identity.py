"""Identity scoring of reconstructions, what matters for faces (spec §3.2): embeddings under the evaluation model
(Θ before the round) against the true identity's template (the mean unit embedding of its real images), accepted
above the threshold of --far on every pair of the participants' real images; chance is the same acceptance of
other identities' real images (or templates)."""
from __future__ import annotations

import numpy as np
import torch

from .run_view import embed, model_at
from .scoring import identity_recovered, identity_recovery, templates, threshold_at_far, unit


def identity_scores(cfg, theta: torch.Tensor, images, identities, rebuilt_images, assigned, far: float) -> dict:
    """Identity recovered at `far` per reconstruction, against chance (other identities' real images)."""
    evaluation, _ = model_at(cfg, theta)
    real = embed(evaluation, images.to(theta.dtype))
    rebuilt = embed(evaluation, rebuilt_images)
    cos = (unit(real) @ unit(real).T).numpy()
    upper = np.triu_indices(len(real), 1)
    threshold = threshold_at_far(cos[upper], (identities[:, None] == identities[None])[upper], far)
    template = templates(real, identities)
    per_image = [identity_recovery(rebuilt[i:i + 1], real[identities != identities[j]], template[identities[j]],
                                   threshold)
                 for i, j in enumerate(assigned)]
    return {"far": far, "threshold": threshold, "recovered": float(np.mean([p["recovered"] for p in per_image])),
            "chance": float(np.mean([p["chance"] for p in per_image])),
            "pairs": f"every pair of the participants' {len(real)} real images under it"}


def client_identity(cfg, theta, pool: dict, rebuilt: dict, far: float) -> dict:
    """Per attacked client: its identity recovered from its reconstructions, against chance (see the module)."""
    evaluation, _ = model_at(cfg, theta)
    real = {k: embed(evaluation, x.to(theta.dtype)) for k, x in pool.items()}
    everyone = torch.cat(list(real.values()))
    owner = np.concatenate([[k] * len(e) for k, e in real.items()])
    cos = (unit(everyone) @ unit(everyone).T).numpy()
    upper = np.triu_indices(len(everyone), 1)
    threshold = threshold_at_far(cos[upper], (owner[:, None] == owner[None])[upper], far)
    template = templates(everyone, owner)
    others = {k: torch.stack([template[j] for j in real if j != k]) for k in rebuilt}
    per_client = {k: {"recovered": bool(identity_recovered(templates(embed(evaluation, x), np.zeros(len(x)))[0],
                                                           template[k], threshold)),
                      "images_recovered": float(identity_recovered(embed(evaluation, x), template[k],
                                                                   threshold).mean()),
                      "chance": float(identity_recovered(others[k], template[k], threshold).mean())}
                  for k, x in rebuilt.items()}
    return {"far": far, "threshold": threshold, "per_client": per_client,
            "recovered": float(np.mean([c["recovered"] for c in per_client.values()])),
            "images_recovered": float(np.mean([c["images_recovered"] for c in per_client.values()])),
            "chance": float(np.mean([c["chance"] for c in per_client.values()])),
            "pairs": f"every pair of the real images of the round's {len(real)} clients under it"}
