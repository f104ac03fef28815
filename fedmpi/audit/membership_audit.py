"""Identity membership inference on Θ after a recorded round (membership.py): each identity scored by how
compact its images are under Θ, members (the identities the model trained on) against non-members of the
same set that it never trained on; the AUC, beside the ε the run accounted up to the round (central or
distributed DP: the log's `privacy` table at fed.dp.delta; PrivacyFace: its `classes` table) and the highest
AUC any membership test can reach under that (ε, δ) [Kairouz, Oh, Viswanath 2015]. Across devices the members
are the face clients sampled in rounds 1..R (the log's `clients` table), the non-members those never sampled."""
from __future__ import annotations

import numpy as np

from .gallery import build_gallery
from .membership import dp_tpr_bound, membership_attack
from .run_view import Refused, RunView, log_row, sampled_clients

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
    """The identities Θ after round R trained on; Refused where the run has none of the same set it did not."""
    if not view.cfg.cross_device:
        raise Refused("a silo run trains on every identity its parties hold: membership needs identities of the "
                      "same set that Θ never saw, which only a cross-device run of face clients has (the clients "
                      "never sampled)")
    clients = sampled_clients(view.run, view.round)
    if len(clients) == view.cfg.clients.population:
        raise Refused(f"every one of the {len(clients)} face clients was sampled by round {view.round}: no "
                      f"non-members are left (audit an earlier round)")
    n = view.cfg.clients.identities_per_client       # client c holds identities [c·n, (c+1)·n)
    return (clients[:, None] * n + np.arange(n)).reshape(-1)


def run(view: RunView, options) -> tuple[dict, dict]:
    """The attack's result (no picture)."""
    members = members_of(view)
    gallery = build_gallery(view.cfg, view.received["theta_after"])
    found = membership_attack(gallery.embeddings, gallery.identity, members)
    return {**found, "model": "Θ after the round", "score": "mean pairwise cosine of an identity's images",
            "nonmember_source": "face clients never sampled in rounds 1..R", "dp": accounted(view)}, {}


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
