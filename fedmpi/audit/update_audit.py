"""The update-inversion attack of a recorded round: the images behind one silo party's FedAvg upload θ_k − Θ are
reconstructed by Inverting Gradients' FedAvg variant (party_update.py), scored against the party's own images by
PSNR / SSIM after the assignment by PSNR, and by identity: the reconstruction's embedding under the evaluation
model (Θ before the round) against its identity's template, at the threshold of --far on pairs of the party's
real images, beside the same rate for other identities' real images (chance)."""
from __future__ import annotations

import numpy as np
import torch

from .party_update import invert_party_update
from .report import write_png
from .run_view import Refused, RunView, as_parameters, embed, model_at, party_images
from .scoring import identity_recovery, score_reconstructions, templates, threshold_at_far, unit

NAME = "inversion"
ATTACKED_RULES = ("fedavg",)    # whose local step the audit simulates: SGD with the party's local momentum


def check_attackable(cfg, received: dict, party: str | None) -> str:
    """The upload to attack, or Refused naming the setting and why."""
    if cfg.cross_device:
        raise Refused("device clients are not attacked yet: the recording holds each client's upload, but the "
                      "simulation of a client's local epochs (and its class row's re-identification) is not built")
    if received["secure"]:
        raise Refused("under secure aggregation the server holds only the sum (theta_after - theta_before): the "
                      "attack of a sum over parties is not built; the recording has no single upload")
    if received["algorithm"] not in ATTACKED_RULES:
        raise Refused(f"fed.algorithm={received['algorithm']}: the audit simulates the local SGD steps of "
                      f"{', '.join(ATTACKED_RULES)} only, and this rule's local step differs")
    names = received["upload_names"]
    if party is None:
        return names[0]
    if party not in names:
        raise Refused(f"--party {party}: round {received['round']} holds the uploads of {', '.join(names)}")
    return party


def as_unit(x: torch.Tensor) -> torch.Tensor:
    """[-1, 1] -> [0, 1], the range of PSNR / SSIM and of the picture."""
    return (x + 1) / 2


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
            "pairs": f"every pair of the party's {len(real)} real images under it"}


def run(view: RunView, options) -> tuple[dict, dict]:
    """The attack's result, and its picture ({file name: draw(path)}) for the report's folder."""
    cfg, received = view.cfg, view.received
    party = check_attackable(cfg, received, options.party)
    images, identities = party_images(cfg, party)
    from fedmpi.config.epochs import rank_batch

    model, state = model_at(cfg, received["theta_before"])
    k = received["upload_names"].index(party)
    observed = as_parameters(model, received["uploads"][k, :state.n_trainable]
                             - received["theta_before"][:state.n_trainable])
    ranks = next(p.ranks for p in cfg.parties if p.name == party)
    batch = rank_batch(cfg, party) * ranks
    found = invert_party_update(model, observed, batch, tuple(images.shape[1:]), steps=cfg.fed.K,
                                lr=cfg.lr_at_round(view.round - 1), momentum=cfg.fed.local_momentum,
                                scale=cfg.model.scale, margin=cfg.margin, iterations=options.iterations,
                                restarts=options.restarts, data_range=(-1.0, 1.0), seed=options.seed)
    scores = score_reconstructions(as_unit(found.images), as_unit(images.to(found.images.dtype)))
    identity = identity_scores(cfg, received["theta_before"], images, identities, found.images, scores["assigned"],
                               options.far)
    identity["model"] = "Θ before the round" + (" (the run's start)" if view.round == 1 else
                                                " (it saw the party's data in earlier rounds)")
    picture = {"reconstructions.png": lambda path: write_png(
        path, as_unit(found.images), as_unit(images[torch.as_tensor(scores["assigned"])]),
        f"{view.run.name}, round {view.round}, {party}")}
    dp = ", central DP" if received["dp"] else ""
    return {"upload": party, "setting": f"silo party, {received['algorithm']}, K={cfg.fed.K}{dp}",
            "received": "each party's upload in the clear" + (" (central DP noises only the server's result)"
                                                              if received["dp"] else ""),
            "attack": f"Inverting Gradients' FedAvg variant on {batch} images, the party's classifier unknown",
            "reconstruction": {"count": batch, "iterations": options.iterations, "restarts": options.restarts,
                          "objective": found.objective, "assigned": scores["assigned"], "psnr": scores["psnr"],
                          "psnr_mean": float(np.mean(scores["psnr"])), "psnr_best": float(np.max(scores["psnr"])),
                          "ssim": scores.get("ssim"),
                          "ssim_mean": float(np.mean(scores["ssim"])) if "ssim" in scores else None},
            "identity": identity}, picture


def lines(result: dict) -> list[str]:
    """This attack's part of audit.md."""
    inv, ident = result["reconstruction"], result["identity"]
    return [f"What the server received: {result['received']}.", "",
            f"Attacked: the upload of {result['upload']} ({result['setting']}); {result['attack']}.", "",
            "| measure | value |", "|---|---|",
            f"| reconstructions | {inv['count']} (iterations {inv['iterations']}, restarts {inv['restarts']}, "
            f"objective {inv['objective']:.4f}) |",
            f"| PSNR (dB), mean / best | {inv['psnr_mean']:.2f} / {inv['psnr_best']:.2f} |",
            f"| SSIM, mean | {inv['ssim_mean']:.3f} |" if inv.get("ssim_mean") is not None else "| SSIM | images "
            "under 11 pixels a side |",
            f"| identity recovered at FAR {ident['far']:g} | {ident['recovered']:.3f} |",
            f"| chance (other identities' real images) | {ident['chance']:.3f} |", "",
            f"Evaluation model: {ident['model']}. Threshold {ident['threshold']:.4f}: {ident['pairs']}.", "",
            "![reconstructions beside their assigned originals](reconstructions.png)", ""]


def summary(result: dict) -> str:
    """This attack's part of the one line the command prints."""
    return (f"PSNR {result['reconstruction']['psnr_mean']:.2f} dB, identity recovered "
            f"{result['identity']['recovered']:.3f} (chance {result['identity']['chance']:.3f})")
