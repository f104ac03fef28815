"""How long a run is in its parties' data: `optim.steps_per_epoch: auto` derived from the images (opt-in, so the
paper's 12,800 stays the default every committed config and study relies on), and the plan a launch states.

An epoch of a party is ceil(images / images per step) steps, a party's step being ranks x batch per rank.
`auto` sets steps_per_epoch to the longest party's epoch, rounded up to a whole number of rounds of fed.K, so

    rounds = optim.epochs x steps_per_epoch / fed.K     (docs/DATA.md, "Your own parties")

and the learning-rate milestones (in epochs) fall on round boundaries."""
from __future__ import annotations

import dataclasses
import math

from fedmpi.errors import ConfigError

AUTO = "auto"


def party_images(spec, data_cfg, key: str) -> int:
    """Training images of one party's data source (its split or Dirichlet part, without data.heldout's)."""
    if spec.kind == "synthetic":
        count = len(range(spec.split_index * spec.identities // spec.split_count,
                          (spec.split_index + 1) * spec.identities // spec.split_count))
        images = count * spec.images_per_identity
        if spec.dirichlet_clients:   # each client of the partition holds floor(n / clients) (data/partition.py)
            images //= spec.dirichlet_clients
        return images - count * data_cfg.heldout
    from fedmpi.config.files import check_source
    from fedmpi.data import DataError, open_training_set   # torch: only for a config that asks for auto

    check_source(spec.kind, spec.path, key)
    try:
        dataset = open_training_set(spec, data_cfg)
    except (DataError, OSError, ValueError) as exc:
        raise ConfigError(f"{key}: {exc}") from None
    return len(dataset) - dataset.num_classes * data_cfg.heldout


def party_sizes(cfg) -> dict[str, tuple[int, int]]:
    """{party of the layout: (training images, images per step)}."""
    from fedmpi.layout import build_layout, rank_batch

    sizes = {}
    for party in build_layout(cfg).parties:
        names = [p.name for p in cfg.parties] if party.name == "centralized" else [party.name]
        images = sum(party_images(spec, cfg.data, f"parties.{name}.data.path")
                     for spec, name in zip(party.specs, names))
        sizes[party.name] = (images, len(party.ranks) * rank_batch(cfg, party.name))
    return sizes


def epoch_steps(sizes: dict[str, tuple[int, int]]) -> tuple[str, int]:
    """(the party whose epoch takes most steps, those steps)."""
    steps = {name: math.ceil(images / step) for name, (images, step) in sizes.items()}
    longest = max(steps, key=steps.get)
    return longest, steps[longest]


def derive_steps_per_epoch(cfg):
    """The config with `optim.steps_per_epoch: auto` replaced by its value (the config itself otherwise)."""
    if cfg.optim.steps_per_epoch != AUTO:
        return cfg
    if cfg.cross_device:
        raise ConfigError("optim.steps_per_epoch: auto counts the silo parties' images; a cross-device run "
                          "sets its length with clients.rounds")
    K = max(cfg.fed.K, 1)
    _, steps = epoch_steps(party_sizes(cfg))
    return dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, steps_per_epoch=math.ceil(steps / K) * K))


def plan_line(cfg, sizes: dict[str, tuple[int, int]]) -> str:
    """'N rounds of K steps: E epochs of the largest party (NAME: I images, S a step)', said at a launch's start."""
    if cfg.cross_device:
        return ""
    longest, _ = epoch_steps(sizes)
    images, step = sizes[longest]
    epochs = cfg.planned_rounds * cfg.fed.K * step / max(images, 1)
    return (f"plan: {cfg.planned_rounds} rounds of {cfg.fed.K} steps (optim.epochs x optim.steps_per_epoch / fed.K): "
            f"{epochs:.3g} epochs of the largest party ({longest}: {images} images, {step} a step)")
