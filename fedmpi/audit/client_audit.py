"""The update inversion of device clients (one identity per phone): each attacked client's θ_c − Θ, or the
cohort's aggregate Θ_after − Θ_before (under secure aggregation the only view), inverted by simulating every
client's local training (client_update.py), scored against the clients' own images by PSNR / SSIM and by identity
(identity.py): a client's identity is recovered when the template of its reconstructions is accepted against
its true template; for the aggregate, each reconstruction against the identity of the image it was assigned."""
from __future__ import annotations

import numpy as np
import torch

from fedmpi.models.frozen_batch_norm import BatchNormMode

from .client_update import client_plan, invert_cohort_update
from .identity import client_identity, identity_scores
from .local_rules import local_step
from .run_view import Refused, as_parameters, client_images, model_at
from .scoring import as_unit, score_reconstructions


def attacked_clients(view, clients) -> list[int]:
    """The clients to attack (the round's first upload by default, every upload for ["all"]), or Refused naming
    why not."""
    cfg = view.cfg
    if not cfg.clients.face_clients:
        raise Refused(f"clients.dataset={cfg.clients.dataset}: the update inversion attacks face clients only "
                      f"(clients.dataset=faces), whose identity it scores")
    if cfg.clients.identities_per_client != 1:
        raise Refused(f"clients.identities_per_client={cfg.clients.identities_per_client}: an album's images "
                      f"belong to rows the server cannot tell apart; the inversion attacks one identity per phone")
    held = held_clients(view)
    if list(clients or []) == ["all"]:
        return held
    bad = [c for c in clients or [] if not str(c).isdigit()]
    if bad:
        raise Refused(f"--client {bad[0]}: name a client by its number, or all")
    clients = held[:1] if not clients else [int(c) for c in clients]
    absent = [c for c in clients if c not in held]
    if absent:
        raise Refused(f"--client {absent[0]}: round {view.round} holds the uploads of clients "
                      f"{', '.join(map(str, held))}")
    return clients


def held_clients(view) -> list[int]:
    return [int(name.split()[-1]) for name in view.received["upload_names"]]


def invert_clients(view, observed: torch.Tensor, clients: list, pool: dict, weights: list, options):
    """The reconstructions of `clients`' images behind `observed` (Σ weights[c]·(θ_c − Θ), flat), each client's
    round replayed (its plan, its local step), and each client's local step count."""
    cfg, theta = view.cfg, view.received["theta_before"]
    model, _ = model_at(cfg, theta)
    model.train()
    BatchNormMode(model, cfg.clients.batch_norm == "frozen").apply()
    plans = [client_plan(cfg.run.seed, cfg.clients.epochs, cfg.optim.batch_size, cfg.clients.augment, k,
                         view.round - 1, len(pool[k])) for k in clients]
    steps = [local_step(view, model, len(plan)) for plan in plans]
    found = invert_cohort_update(model, as_parameters(model, observed), plans, [len(pool[k]) for k in clients],
                                 weights, tuple(pool[clients[0]].shape[1:]), cfg.model.embedding_size,
                                 lr=cfg.lr_at_round(view.round - 1), steps=steps, nu=cfg.clients.positive_margin,
                                 iterations=options.iterations, restarts=options.restarts, seed=options.seed,
                                 tv=options.tv)
    return found, [len(plan) for plan in plans], steps[0].words


def attack_clients(view, options, evaluation) -> dict:
    """Every attacked client's upload inverted and scored apart, identity under `evaluation` (evaluation.py); the
    parts of the inversion's result."""
    clients = attacked_clients(view, getattr(options, "client", None))
    received, n = view.received, view.received["n_trainable"]
    held = held_clients(view)
    pool = {k: x for k, (x, _) in zip(held, client_images(view.cfg, held))}
    rebuilt, originals, psnr, ssim, objectives, steps = {}, [], [], [], [], []
    for k in clients:
        upload = received["uploads"][held.index(k), :n] - received["theta_before"][:n]
        found, count, words = invert_clients(view, upload, [k], pool, [1.0], options)
        steps += count
        rebuilt[k] = found.images
        scores = score_reconstructions(as_unit(found.images), as_unit(pool[k].to(found.images.dtype)))
        originals.append(pool[k][torch.as_tensor(scores["assigned"])])
        psnr += list(scores["psnr"])
        ssim += list(scores.get("ssim", []))
        objectives.append(found.objective)
    return {"clients": clients, "steps": steps, "words": words, "rebuilt": torch.cat(list(rebuilt.values())),
            "originals": torch.cat(originals), "psnr": psnr, "ssim": ssim or None,
            "objective": float(np.mean(objectives)),
            "identity": client_identity(evaluation, pool, rebuilt, options.far)}


def cohort_weights(view, sizes: list) -> list:
    """The server's weights of the cohort's updates: n_c / Σ n (FedAvg's), or 1 / C under DP (each client's
    clipped update counted once; the clipping itself is not simulated)."""
    if view.received["dp"]:
        return [1.0 / len(sizes)] * len(sizes)
    return [n / sum(sizes) for n in sizes]


def attack_cohort(view, options, evaluation) -> dict:
    """The cohort's aggregate inverted as the weighted sum of every client's simulated round; scored against
    every client's images, identity under `evaluation`."""
    attacked_clients(view, None)
    received, n = view.received, view.received["n_trainable"]
    held = held_clients(view)
    truth = client_images(view.cfg, held)
    pool = {k: x for k, (x, _) in zip(held, truth)}
    weights = cohort_weights(view, [len(pool[k]) for k in held])
    found, steps, words = invert_clients(view, received["theta_after"][:n] - received["theta_before"][:n], held,
                                         pool, weights, options)
    images = torch.cat([x for x, _ in truth]).to(found.images.dtype)
    identities = np.concatenate([y for _, y in truth])
    scores = score_reconstructions(as_unit(found.images), as_unit(images))
    return {"clients": held, "steps": steps, "words": words, "rebuilt": found.images,
            "originals": images[torch.as_tensor(scores["assigned"])], "psnr": list(scores["psnr"]),
            "ssim": list(scores["ssim"]) if "ssim" in scores else None, "objective": found.objective,
            "identity": identity_scores(evaluation, images, identities, found.images, scores["assigned"],
                                        options.far)}
