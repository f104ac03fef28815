"""A bad party's upload (`parties.NAME.attack`, robustness studies): the party trains honestly, then its leader
sends Θ + scale·(θ_i − Θ) for the trainable values (a sign-flipped update with -1, a scaled one with 10, Θ itself
with 0; frozen values and BN statistics go as trained), and its class payload `short_rows` rows short."""
from __future__ import annotations

from dataclasses import dataclass

import torch


def attack_of(cfg, party_name: str):
    """The party's attack (AttackSpec); None (honest) for a party the config does not list (the centralized union)."""
    return next((p.attack for p in cfg.parties if p.name == party_name), None)


@dataclass(frozen=True)
class PartyAttack:
    """What a party's leader does to its uploads: `scale` (1.0: honest) and the class payload's `short_rows` (0)."""
    scale: float = 1.0
    short_rows: int = 0


def party_attack(cfg, party_name: str) -> PartyAttack:
    """The party's attack; an honest one for a party the config does not list."""
    attack = attack_of(cfg, party_name)
    return PartyAttack() if attack is None else PartyAttack(attack.scale, attack.short_rows)


def scale_update(upload: torch.Tensor, global_model: torch.Tensor, scale: float) -> torch.Tensor:
    """In place: upload <- global_model + scale·(upload − global_model) (flat trainable values)."""
    return upload.sub_(global_model).mul_(scale).add_(global_model)
