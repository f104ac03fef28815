"""Identity membership inference on Θ after a recorded round (membership.py): each identity scored by how
compact its images are under Θ, members (the identities the model trained on) against non-members of the
same set that it never trained on; the AUC, beside the ε the run accounted up to the round (central or
distributed DP: the log's `privacy` table at fed.dp.delta; PrivacyFace: its `classes` table) and the highest
AUC any membership test can reach under that (ε, δ) [Kairouz, Oh, Viswanath 2015]. Across devices the members
are the face clients sampled in rounds 1..R (the log's `clients` table), the non-members those never sampled. In
the silo the members are every identity the parties trained on, the non-members held-out identities of the same
distribution that no party holds (--nonmembers, heldout.py)."""
from __future__ import annotations

import numpy as np
import torch

from .gallery import build_gallery, embed_all
from .heldout import OPTION, heldout_images
from .membership import dp_tpr_bound, membership_attack
from .run_view import Refused, RunView, log_row, model_at, sampled_clients

NAME = "membership"


def auc_bound(epsilon: float, delta: float, points: int = 20001) -> float:
    """The area under the (ε, δ)-DP bound on TPR over FPR in [0, 1] (e^ε / (1 + e^ε) where δ = 0)."""
    fpr = np.linspace(0.0, 1.0, points)
    return float(np.trapezoid(dp_tpr_bound(fpr, epsilon, delta), fpr))


def accounted(view: RunView) -> dict:
    """The (ε, δ) the run accounted up to the round, and by what; {} where the run has no DP."""
    cfg = view.cfg
    if cfg.fed.dp.enabled:
        row = log_row(view.run, "privacy", view.round)
        found = {"by": "DP-FedAvg (the log's privacy table)", "epsilon": row.get("epsilon"), "delta": cfg.fed.dp.delta}
    elif cfg.fed.algorithm == "privacyface":
        row = log_row(view.run, "classes", view.round)
        # the clusters are noised, Θ is not: the bound is the clusters', beside an attack on Θ it does not bind
        found = {"by": "PrivacyFace's clusters (the log's classes table); Θ itself is not noised",
                 "epsilon": row.get("epsilon"), "delta": row.get("delta")}
    else:
        return {}
    if found["epsilon"] is not None:
        found["auc_bound"] = auc_bound(found["epsilon"], found["delta"])
    return found


def members_of(view: RunView) -> np.ndarray:
    """The device identities Θ after round R trained on; Refused where every client was sampled."""
    clients = sampled_clients(view.run, view.round)
    if len(clients) == view.cfg.clients.population:
        raise Refused(f"every one of the {len(clients)} face clients was sampled by round {view.round}: no "
                      f"non-members are left (audit an earlier round)")
    n = view.cfg.clients.identities_per_client       # client c holds identities [c·n, (c+1)·n)
    return (clients[:, None] * n + np.arange(n)).reshape(-1)


def device_membership(view: RunView, options) -> tuple[dict, str]:
    if getattr(options, "nonmembers", None):
        raise Refused(f"{OPTION}: a cross-device run's non-members are its face clients never sampled; the option "
                      f"serves a silo run")
    gallery = build_gallery(view.cfg, view.received["theta_after"])
    return (membership_attack(gallery.embeddings, gallery.identity, members_of(view)),
            "face clients never sampled in rounds 1..R")


def silo_membership(view: RunView, options) -> tuple[dict, str]:
    """Every party's identity (members) against the held-out identities of --nonmembers, under Θ after R."""
    folders = getattr(options, "nonmembers", None)
    if not folders:
        raise Refused(f"a silo run trains on every identity its parties hold: name held-out identities of the same "
                      f"distribution that no party holds by {OPTION} DIR [DIR ...] (RecordIO folders, train.rec "
                      f"and train.idx)")
    theta = view.received["theta_after"]
    model, _ = model_at(view.cfg, theta)
    gallery = build_gallery(view.cfg, theta, model)
    images, identities = heldout_images(view.cfg, folders)
    embedded = embed_all(model, images, theta.dtype)
    outside = identities + int(gallery.identity.max()) + 1
    found = membership_attack(torch.cat([gallery.embeddings, embedded]), np.concatenate([gallery.identity, outside]),
                              np.unique(gallery.identity))
    return found, f"held-out identities no party holds ({OPTION} {' '.join(map(str, folders))})"


def run(view: RunView, options) -> tuple[dict, dict]:
    """The attack's result (no picture)."""
    found, source = (device_membership if view.cfg.cross_device else silo_membership)(view, options)
    return {**found, "model": "Θ after the round", "score": "mean pairwise cosine of an identity's images",
            "nonmember_source": source, "dp": accounted(view)}, {}


def lines(result: dict) -> list[str]:
    """This attack's part of audit.md."""
    dp = result["dp"]
    out = [f"Members: {result['members']} identities Θ trained on; non-members: {result['nonmembers']} "
           f"({result['nonmember_source']}); score: {result['score']} under {result['model']}.", "",
           "| measure | value |", "|---|---|", f"| membership AUC | {result['auc']:.3f} |", "| chance | 0.500 |"]
    if dp:
        out += [f"| ε accounted ({dp['by']}) | {dp['epsilon']:.4g} at δ {dp['delta']:.3g} |",
                f"| highest AUC that (ε, δ) permits | {dp['auc_bound']:.3f} |"]
    else:
        out.append("| ε accounted | no DP in this run |")
    return out + [""]


def summary(result: dict) -> str:
    """This attack's part of the one line the command prints."""
    dp = result["dp"]
    bound = f", ε {dp['epsilon']:.3g} permits AUC {dp['auc_bound']:.3f}" if dp.get("auc_bound") else ""
    return f"membership AUC {result['auc']:.3f} (chance 0.500){bound}"
