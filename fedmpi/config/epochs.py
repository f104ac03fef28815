"""How long a run is in its parties' data: `optim.steps_per_epoch: auto` (opt-in, so the paper's 12,800 stays the
default every committed config and study relies on) and the plan a launch states. The parties' images are counted
by fedmpi/party_sizes.py (the config reads no data); this module only does the arithmetic.

An epoch of a party is ceil(images / images per step) steps, a party's step being ranks x batch per rank.
`auto` sets steps_per_epoch to the longest party's epoch, rounded up to a whole number of rounds of fed.K, so

    rounds = optim.epochs x steps_per_epoch / fed.K     (docs/DATA.md, "Your own parties")

and the learning-rate milestones (in epochs) fall on round boundaries."""
from __future__ import annotations

import dataclasses
import math

from fedmpi.errors import ConfigError

AUTO = "auto"


def rank_batch(cfg, party_name: str) -> int:
    """Images per rank and step of party `party_name`: its `parties.NAME.batch_size`, else optim.batch_size
    (also for the merged party of fed.setting=centralized and the cross-device clients)."""
    for p in cfg.parties:
        if p.name == party_name and p.batch_size:
            return int(p.batch_size)
    return int(cfg.optim.batch_size)


def party_groups(cfg) -> list[tuple[str, int, tuple, tuple[str, ...]]]:
    """The layout's parties as (name, ranks, data specs, the configured parties they come from): every party
    (federated), their union (centralized), the one that trains alone (solo), or the cross-device clients."""
    if cfg.cross_device:   # the virtual clients' trainer ranks (fedmpi.crossdevice), whatever the rule
        return [("clients", cfg.clients.ranks, (), ())]
    if cfg.fed.setting == "centralized":
        return [("centralized", sum(p.ranks for p in cfg.parties), tuple(p.data for p in cfg.parties),
                 tuple(p.name for p in cfg.parties))]
    return [(p.name, p.ranks, (p.data,), (p.name,)) for p in cfg.parties
            if cfg.fed.setting != "solo" or p.name == cfg.fed.solo_party]


def epoch_steps(sizes: dict[str, tuple[int, int]]) -> tuple[str, int]:
    """(the party whose epoch takes most steps, those steps) from {party: (images, images per step)}."""
    steps = {name: math.ceil(images / step) for name, (images, step) in sizes.items()}
    longest = max(steps, key=steps.get)
    return longest, steps[longest]


def derived_steps(cfg, sizes: dict[str, tuple[int, int]]) -> int:
    """`auto`'s steps_per_epoch: the longest party's epoch rounded up to whole rounds of fed.K."""
    K = max(cfg.fed.K, 1)
    return math.ceil(epoch_steps(sizes)[1] / K) * K


def plan_line(cfg, sizes: dict[str, tuple[int, int]]) -> str:
    """'N rounds of K steps ...: E epochs of the largest party (NAME: I images, S a step)', said at a launch's
    start."""
    if cfg.cross_device:
        return ""
    longest, _ = epoch_steps(sizes)
    images, step = sizes[longest]
    epochs = cfg.planned_rounds * cfg.fed.K * step / max(images, 1)
    return (f"plan: {cfg.planned_rounds} rounds of {cfg.fed.K} steps (optim.epochs x optim.steps_per_epoch / fed.K): "
            f"{epochs:.3g} epochs of the largest party ({longest}: {images} images, {step} a step)")


def with_derived_steps(cfg, sizes, validate):
    """The config with `auto` replaced by derived_steps: every other setting is checked first (`validate`, with a
    placeholder), then `sizes(cfg)` counts the parties' images (None: no data may be read here, refused)."""
    placeholder = dataclasses.replace(cfg.optim, steps_per_epoch=max(cfg.fed.K, 1))
    checked = validate(dataclasses.replace(cfg, optim=placeholder))
    if checked.cross_device:
        raise ConfigError("optim.steps_per_epoch: auto counts the silo parties' images; a cross-device run sets "
                          "its length with clients.rounds")
    if sizes is None:
        raise ConfigError("optim.steps_per_epoch: auto is counted from the parties' data by the launch "
                          "(python -m fedmpi.run, python -m fedmpi.layout); give a number of steps here")
    return dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, steps_per_epoch=derived_steps(
        checked, sizes(checked))))
