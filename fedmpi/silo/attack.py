"""A bad party's upload (`parties.NAME.attack`, robustness studies): the party trains honestly, then its leader
sends Θ + scale·(θ_i − Θ) for the trainable values (a sign-flipped update with -1, a scaled one with 10, Θ itself
with 0; frozen values and BN statistics go as trained), and its class payload `short_rows` rows short."""
from __future__ import annotations

import torch


def attack_of(cfg, party_name: str):
    """The party's attack (AttackSpec); None (honest) for a party the config does not list (the centralized union)."""
    return next((p.attack for p in cfg.parties if p.name == party_name), None)


def attack_scale(cfg, party_name: str) -> float:
    """The scale of the party's attack; 1.0 (honest) for a party the config does not list."""
    attack = attack_of(cfg, party_name)
    return 1.0 if attack is None else attack.scale


def short_rows(cfg, party_name: str) -> int:
    """The rows the party's class payload leaves off its end (0: honest)."""
    attack = attack_of(cfg, party_name)
    return 0 if attack is None else attack.short_rows


def scale_update(upload: torch.Tensor, global_model: torch.Tensor, scale: float) -> torch.Tensor:
    """In place: upload <- global_model + scale·(upload − global_model) (flat trainable values)."""
    return upload.sub_(global_model).mul_(scale).add_(global_model)
