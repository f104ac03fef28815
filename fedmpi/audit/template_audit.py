"""Template re-identification of a recorded round: the class rows uploaded beside θ (FedAwS / FedGC: a party's
rows or a face client's w_c) ranked against a gallery of every participant identity's template under Θ after
the round (the mean unit embedding of its real images, gallery.py): top-1 rate, the rate above the threshold
of --far on pairs of the real images, chance 1 / gallery size (templates.py). PrivacyFace's released clusters
(centre p, cone cos ≥ κ) name the identities whose template falls inside each cone, beside the (ε, δ) the
senders have spent (the log's `classes` table)."""
from __future__ import annotations

import math

import numpy as np
import torch

from .gallery import build_gallery, far_threshold
from .run_view import Refused, RunView, log_row
from .scoring import templates as mean_templates
from .templates import cone_members, reidentify

NAME = "templates"


def check_attackable(view: RunView) -> str:
    """'rows' or 'clusters', or Refused naming what the run's method uploads instead."""
    received = view.received
    for kind, key in (("rows", "class_rows"), ("clusters", "clusters")):
        if key in received and len(received[key]) == 0:
            raise Refused(f"round {view.round} holds no {key}: the server stored none of them (each one left out "
                          f"as not finite or out of range)")
        if key in received:
            return kind
    raise Refused(f"round {view.round} holds no class rows or clusters: fed.algorithm={received['algorithm']} "
                  f"uploads {what_leaves(view)} (class rows: fedaws, fedgc; clusters: privacyface)")


def what_leaves(view: RunView) -> str:
    """The run's own words for what leaves a participant (the log's root attribute leaves_party)."""
    import h5py

    with h5py.File(view.run / "log.h5", "r") as f:
        said = f.attrs.get("leaves_party")
    return str(said) if said is not None else "the backbone and nothing of its class embeddings"


def gallery_of(gallery) -> tuple[torch.Tensor, np.ndarray]:
    """[G, d] templates and the identity of each."""
    found = mean_templates(gallery.embeddings, gallery.identity)
    ids = np.array(sorted(found))
    return torch.stack([found[i] for i in ids]), ids


def rows_result(received: dict, gallery, threshold: float) -> dict:
    templates, ids = gallery_of(gallery)
    owners = np.searchsorted(ids, gallery.owner(received["class_row_sender"].numpy(),
                                                  received["class_row_label"].numpy()))
    found = reidentify(received["class_rows"], templates, owners, threshold)
    senders = np.unique(received["class_row_sender"].numpy())
    return {"rows": len(owners), "senders": len(senders), "gallery": len(ids), **found}


def clusters_result(clusters: torch.Tensor, senders: np.ndarray, gallery) -> dict:
    """Per released cluster [p | α | released]: the identities inside its cone cos ≥ κ = cos α, and how many of
    them are its sender's."""
    templates, ids = gallery_of(gallery)
    d = clusters.shape[1] - 2
    inside, own = [], []
    for row, sender in zip(clusters, senders):
        if float(row[d + 1]) <= 0:
            continue           # no cluster in this slot
        members = ids[cone_members(row[:d], math.cos(float(row[d])), templates)]
        inside.append(len(members))
        own.append(len(np.intersect1d(members, gallery.sender_identities(int(sender)))))
    return {"clusters": len(inside), "senders": len(np.unique(senders)), "gallery": len(ids),
            "inside": inside, "own_inside": own,
            "inside_mean": float(np.mean(inside)) if inside else 0.0,
            "with_own": float(np.mean(np.array(own) > 0)) if own else 0.0}


def run(view: RunView, options) -> tuple[dict, dict]:
    """The attack's result (no picture)."""
    kind = check_attackable(view)
    # the rows were fitted to the embeddings of the model the participants trained from, which the server holds
    # as it sent it: Θ before the round (Θ after it is, under DP, the noised result)
    gallery = build_gallery(view.cfg, view.received["theta_before"])
    where = "face clients" if view.cfg.cross_device else "silo parties"
    result = {"setting": f"{where}, {view.received['algorithm']}", "kind": kind, "model": "Θ before the round",
              "secure": bool(view.received["secure"]), "dp": bool(view.received["dp"])}
    if kind == "rows":
        threshold = far_threshold(gallery, options.far, options.seed)
        result.update(rows_result(view.received, gallery, threshold), far=options.far)
    else:
        spent = log_row(view.run, "classes", view.round)
        result.update(clusters_result(view.received["clusters"], view.received["cluster_sender"].numpy(), gallery),
                      epsilon=spent.get("epsilon"), delta=spent.get("delta"))
    return result, {}


def lines(result: dict) -> list[str]:
    """This attack's part of audit.md."""
    head = [f"Setting: {result['setting']}; gallery: {result['gallery']} identities' templates under "
            f"{result['model']}{defences(result)}.", "", "| measure | value |", "|---|---|"]
    if result["kind"] == "rows":
        return head + [f"| class rows uploaded | {result['rows']} (of {result['senders']} senders) |",
                       f"| re-identified, top-1 | {result['top1']:.3f} |",
                       f"| above the threshold at FAR {result['far']:g} | {result['at_threshold']:.3f} "
                       f"(threshold {result['threshold']:.4f}) |",
                       f"| chance, 1 / gallery | {result['chance']:.4f} |", ""]
    epsilon = "not logged" if result["epsilon"] is None else f"{result['epsilon']:.4g} at δ {result['delta']:.3g}"
    return head + [f"| clusters released | {result['clusters']} (of {result['senders']} senders) |",
                   f"| identities inside a cone, mean | {result['inside_mean']:.2f} |",
                   f"| cones holding one of their sender's identities | {result['with_own']:.3f} |",
                   f"| ε spent by the client that released most | {epsilon} |", ""]


def defences(result: dict) -> str:
    """What the run's defences covered: the backbone, never these class payloads."""
    said = [what for what, on in (("masked by secure aggregation", result["secure"]),
                                  ("noised by DP", result.get("dp"))) if on]
    return f" (the backbone was {' and '.join(said)}; the class payloads were not)" if said else ""


def summary(result: dict) -> str:
    """This attack's part of the one line the command prints."""
    if result["kind"] == "rows":
        return (f"{result['rows']} class rows re-identified top-1 {result['top1']:.3f} "
                f"(chance {result['chance']:.4f})")
    return (f"{result['clusters']} clusters hold {result['inside_mean']:.2f} identities each, "
            f"{result['with_own']:.3f} their sender's")
