"""A participant's local step as the server can simulate it from the public configuration (the rules'
local_step, fedmpi/algorithms): g + λθ (optim.weight_decay), then

  fedavg    heavy-ball momentum SGD with fed.local_momentum
  fedprox   + μ(θ − Θ) (Li et al. 2020, eq. 2), then momentum SGD as fedavg
  pfm       + β·M/K, plain SGD (FedFace eq. 3), M = (Θ_{R−1} − Θ_R)/η_{R−1} (eq. 6): a function of the global
            models the server itself made, zero in round 1, read from the recording of round R − 1

Any other backbone rule reads state the recording does not hold (SCAFFOLD's c_i and FedDyn's ∇L_i, the
participant's own; the down payloads of MIME-lite and SCAFFOLD), or a method trains its own local objective
(FedFR): refused."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .run_view import Refused, as_parameters, read_received

SIMULATED = ("fedavg", "fedprox", "pfm")


@dataclass
class LocalStep:
    """The arguments of inversion.local_update_of that make its step the rule's, and the step in words."""
    momentum: float
    weight_decay: float
    correct: object          # (name, θ, Θ) -> the rule's term added to the gradient, or None
    words: str


def backbone_rule(cfg) -> str:
    """The rule whose local step a participant runs, or Refused naming why the server cannot simulate it."""
    from fedmpi.algorithms.objective import LocalTraining
    from fedmpi.config.rules import algorithm_method

    method = algorithm_method(cfg)
    rule = method.backbone.name
    if method.training is not LocalTraining:
        raise Refused(f"fed.algorithm={cfg.fed.algorithm}: its participants train their own local objective, "
                      f"which the audit does not simulate (simulated: the local steps of {', '.join(SIMULATED)})")
    if rule not in SIMULATED:
        raise Refused(f"fed.algorithm={cfg.fed.algorithm}: the local step of {rule} reads state the recording does "
                      f"not hold, so the audit does not simulate it (simulated: {', '.join(SIMULATED)})")
    return rule


def pfm_momentum(view, model) -> dict:
    """M of round R per trainable parameter name (eq. 6), from the global models of rounds R − 1 and R."""
    n = view.received["n_trainable"]
    if view.round == 1:
        flat = torch.zeros(n, dtype=view.received["theta_before"].dtype)
    else:
        try:
            previous = read_received(view.run, view.round - 1)["theta_before"]
        except Refused:
            raise Refused(f"fed.algorithm=pfm: its local step adds β·M/K, M = (Θ_{{R−1}} − Θ_R)/η from the global "
                          f"model of round {view.round - 1}, which was not recorded (record it too: "
                          f"log.record_received=[{view.round - 1}, {view.round}])") from None
        flat = (previous[:n] - view.received["theta_before"][:n]) / view.cfg.lr_at_round(view.round - 2)
    names = [name for name, p in model.named_parameters() if p.requires_grad]
    return dict(zip(names, as_parameters(model, flat)))


def local_step(view, model, steps: int) -> LocalStep:
    """The round's local step of the run's rule on `model` (which holds Θ), `steps` local steps a round."""
    cfg = view.cfg
    rule = backbone_rule(cfg)
    decay = float(cfg.optim.weight_decay)
    if rule == "pfm":
        beta, K = float(cfg.optim.momentum), steps
        drift = {name: (beta / K) * m for name, m in pfm_momentum(view, model).items()}
        return LocalStep(0.0, decay, lambda name, p, start: drift[name], f"PFM's step (β·M/K, β={beta:g})")
    momentum = float(cfg.fed.local_momentum or 0.0)
    if rule == "fedprox":
        mu = float(cfg.fed.options["mu"])
        return LocalStep(momentum, decay, (lambda name, p, start: mu * (p - start)) if mu else None,
                         f"FedProx's step (μ={mu:g}, momentum {momentum:g})")
    return LocalStep(momentum, decay, None, f"SGD with momentum {momentum:g}")
