"""What the update inversion attacks in a silo run, as the server holds it: one party's upload θ_k − Θ (in the
clear), or the round's aggregate Θ_after − Θ_before (under secure aggregation the only view of the sum; under
central or distributed DP the noised result; on any averaging run, `--upload aggregate`). Both are inverted by
Inverting Gradients' FedAvg variant (party_update.py) with the rule's local step (local_rules.py): the aggregate
as one update from the union of the summed parties' batches, scored against all of their images."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .local_rules import local_step
from .party_update import invert_party_update
from .run_view import Refused, as_parameters, model_at, party_images


@dataclass
class Target:
    """An update to invert and the images behind it: `names` the participants summed, `images` [N, C, H, W]
    in [-1, 1] with `identities` made distinct across participants, `batch` images reconstructed."""
    names: list
    observed: torch.Tensor       # the flat update over the trainable parameters
    images: torch.Tensor
    identities: np.ndarray
    batch: int


def server_averages(cfg) -> None:
    """Θ_after − Θ_before is a multiple of the participants' weighted mean update, or Refused naming why."""
    from fedmpi.config.rules import algorithm_method

    optimizer = cfg.fed.server.optimizer
    optimizer = algorithm_method(cfg).server_optimizer if optimizer == "auto" else optimizer
    if optimizer != "sgd":
        raise Refused(f"fed.server.optimizer={optimizer}: Θ_after − Θ_before is not a multiple of the "
                      f"participants' mean update, so the aggregate cannot be inverted as one update")
    rule = cfg.fed.aggregation.get("rule", "mean")
    if rule != "mean":
        raise Refused(f"fed.aggregation.rule={rule}: the server step is not the participants' weighted mean, so "
                      f"the aggregate cannot be inverted as one update")


def union(cfg, names: list) -> tuple[torch.Tensor, np.ndarray, int]:
    """The named parties' images and identities (distinct across parties) and their batch size per step."""
    from fedmpi.config.epochs import rank_batch

    images, identities, batch = [], [], 0
    for i, name in enumerate(names):
        x, y = party_images(cfg, name)
        images.append(x)
        identities.append(y.astype(np.int64) + i * (1 << 32))
        batch += rank_batch(cfg, name) * next(p.ranks for p in cfg.parties if p.name == name)
    return torch.cat(images), np.concatenate(identities), batch


def silo_target(view, party: str | None, aggregate: bool) -> Target:
    received = view.received
    n = received["n_trainable"]
    names = received["upload_names"]
    if aggregate:
        server_averages(view.cfg)
        observed = received["theta_after"][:n] - received["theta_before"][:n]
    else:
        party = names[0] if party is None else party
        if party not in names:
            raise Refused(f"--party {party}: round {received['round']} holds the uploads of {', '.join(names)}")
        names = [party]
        observed = received["uploads"][received["upload_names"].index(party), :n] - received["theta_before"][:n]
    images, identities, batch = union(view.cfg, names)
    return Target(names, observed, images, identities, batch)


def invert_silo(view, target: Target, options):
    """The reconstructions of the target's images and the local step's words."""
    cfg = view.cfg
    model, state = model_at(cfg, view.received["theta_before"])
    step = local_step(view, model, cfg.fed.K)
    found = invert_party_update(model, as_parameters(model, target.observed), target.batch,
                                tuple(target.images.shape[1:]), steps=cfg.fed.K, lr=cfg.lr_at_round(view.round - 1),
                                momentum=step.momentum, weight_decay=step.weight_decay, correct=step.correct,
                                scale=cfg.model.scale, margin=cfg.margin, iterations=options.iterations,
                                restarts=options.restarts, data_range=(-1.0, 1.0), seed=options.seed,
                                tv=options.tv)
    return found, step.words
