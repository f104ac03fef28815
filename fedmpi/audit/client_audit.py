"""The update inversion of device clients' uploads (one identity per phone): each attacked client's θ_c − Θ
inverted by simulating its local training (client_update.py), scored against its own images by PSNR / SSIM, and
by identity: a client's identity is recovered when the template of its reconstructions (their mean unit
embedding under the evaluation model, Θ before the round) is accepted against its true template at the threshold
of --far on every pair of the round's clients' real images; chance is the rate at which the other clients' real
templates are accepted against it."""
from __future__ import annotations

import numpy as np
import torch

from fedmpi.models.frozen_batch_norm import BatchNormMode

from .client_update import client_plan, invert_client_update
from .local_rules import local_step
from .run_view import Refused, as_parameters, client_images, embed, model_at
from .scoring import identity_recovered, score_reconstructions, templates, threshold_at_far, unit


def attacked_clients(view, clients) -> list[int]:
    """The clients to attack (the round's first upload by default), or Refused naming why not."""
    cfg, received = view.cfg, view.received
    if not cfg.clients.face_clients:
        raise Refused(f"clients.dataset={cfg.clients.dataset}: the update inversion attacks face clients only "
                      f"(clients.dataset=faces), whose identity it scores")
    if cfg.clients.identities_per_client != 1:
        raise Refused(f"clients.identities_per_client={cfg.clients.identities_per_client}: an album's images "
                      f"belong to rows the server cannot tell apart; the inversion attacks one identity per phone")
    held = [int(name.split()[-1]) for name in received["upload_names"]]
    clients = held[:1] if not clients else [int(c) for c in clients]
    absent = [c for c in clients if c not in held]
    if absent:
        raise Refused(f"--client {absent[0]}: round {view.round} holds the uploads of clients "
                      f"{', '.join(map(str, held))}")
    return clients


def invert_client(view, k: int, images: torch.Tensor, options):
    cfg, received = view.cfg, view.received
    n = received["n_trainable"]
    upload = received["uploads"][received["upload_names"].index(f"client {k}"), :n] - received["theta_before"][:n]
    model, _ = model_at(cfg, received["theta_before"])
    model.train()
    BatchNormMode(model, cfg.clients.batch_norm == "frozen").apply()
    plan = client_plan(cfg.run.seed, cfg.clients.epochs, cfg.optim.batch_size, cfg.clients.augment, k,
                       view.round - 1, len(images))
    step = local_step(view, model, len(plan))
    found = invert_client_update(model, as_parameters(model, upload), plan, len(images), tuple(images.shape[1:]),
                                 cfg.model.embedding_size, lr=cfg.lr_at_round(view.round - 1), step=step,
                                 nu=cfg.clients.positive_margin, iterations=options.iterations,
                                 restarts=options.restarts, seed=options.seed)
    return found, len(plan), step.words


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


def attack_clients(view, options) -> dict:
    """Every attacked client inverted and scored; the parts of the inversion's result."""
    clients = attacked_clients(view, getattr(options, "client", None))
    held = [int(name.split()[-1]) for name in view.received["upload_names"]]
    pool = {k: x for k, (x, _) in zip(held, client_images(view.cfg, held))}
    rebuilt, originals, psnr, ssim, objectives, steps = {}, [], [], [], [], []
    for k in clients:
        found, count, words = invert_client(view, k, pool[k], options)
        steps.append(count)
        rebuilt[k] = found.images
        scores = score_reconstructions((found.images + 1) / 2, (pool[k].to(found.images.dtype) + 1) / 2)
        originals.append(pool[k][torch.as_tensor(scores["assigned"])])
        psnr += list(scores["psnr"])
        ssim += list(scores.get("ssim", []))
        objectives.append(found.objective)
    return {"clients": clients, "steps": steps, "words": words, "rebuilt": torch.cat(list(rebuilt.values())),
            "originals": torch.cat(originals), "psnr": psnr, "ssim": ssim or None,
            "objective": float(np.mean(objectives)),
            "identity": client_identity(view.cfg, view.received["theta_before"], pool, rebuilt, options.far)}
