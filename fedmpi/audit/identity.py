"""Identity scoring of reconstructions, what matters for faces (spec §3.2): embeddings under the evaluation model
(one that did not train on the participants' data, evaluation.py) against the true identity's template (the mean
unit embedding of its real images), accepted above the threshold of --far on every pair of the participants' real
images; chance is the same acceptance of other identities' real images (or templates)."""
from __future__ import annotations

import numpy as np
import torch

from .evaluation import Evaluation
from .run_view import embed
from .scoring import identity_recovered, identity_recovery, pair_threshold, templates, unit


def identity_scores(evaluation: Evaluation, images, identities, rebuilt_images, assigned, far: float) -> dict:
    """Identity recovered at `far` per reconstruction, against chance (other identities' real images)."""
    real = embed(evaluation.model, images.to(evaluation.dtype))
    rebuilt = embed(evaluation.model, rebuilt_images.to(evaluation.dtype))
    threshold = pair_threshold(real, identities, far)
    template = templates(real, identities)
    per_image = [identity_recovery(rebuilt[i:i + 1], real[identities != identities[j]], template[identities[j]],
                                   threshold)
                 for i, j in enumerate(assigned)]
    return {"far": far, "threshold": threshold, "recovered": float(np.mean([p["recovered"] for p in per_image])),
            "chance": float(np.mean([p["chance"] for p in per_image])),
            "pairs": f"every pair of the participants' {len(real)} real images under it", "model": evaluation.words}


def one_client(rebuilt: torch.Tensor, k, template: dict, threshold: float) -> dict:
    """Client k's identity from its reconstructions' embeddings `rebuilt`: their template accepted against k's
    (recovered), k's the closest of the round's templates (top-1), the other clients' templates accepted against
    it (a reconstruction that matches every identity recovers none), and chance: the others' real templates
    accepted against k's."""
    mine = templates(rebuilt, np.zeros(len(rebuilt)))[0.0]
    names = list(template)
    others = torch.stack([template[j] for j in names if j != k])
    closest = names[int(np.argmax([float(unit(mine) @ template[j]) for j in names]))]
    return {"recovered": bool(identity_recovered(mine, template[k], threshold)),
            "top1": bool(closest == k),
            "images_recovered": float(identity_recovered(rebuilt, template[k], threshold).mean()),
            "others_accepted": float(identity_recovered(others, mine, threshold).mean()),
            "chance": float(identity_recovered(others, template[k], threshold).mean())}


def client_identity(evaluation: Evaluation, pool: dict, rebuilt: dict, far: float) -> dict:
    """Per attacked client: its identity recovered from its reconstructions, against chance (one_client); the
    threshold at `far` on every pair of the round's clients' real images, top-1 among their templates."""
    real = {k: embed(evaluation.model, x.to(evaluation.dtype)) for k, x in pool.items()}
    everyone = torch.cat(list(real.values()))
    owner = np.concatenate([[k] * len(e) for k, e in real.items()])
    threshold = pair_threshold(everyone, owner, far)
    template = templates(everyone, owner)
    per_client = {k: one_client(embed(evaluation.model, x.to(evaluation.dtype)), k, template, threshold)
                  for k, x in rebuilt.items()}
    mean = {key: float(np.mean([c[key] for c in per_client.values()]))
            for key in ("recovered", "top1", "images_recovered", "others_accepted", "chance")}
    return {"far": far, "threshold": threshold, "per_client": per_client, **mean, "top1_chance": 1.0 / len(real),
            "pairs": f"every pair of the real images of the round's {len(real)} clients under it",
            "model": evaluation.words}
