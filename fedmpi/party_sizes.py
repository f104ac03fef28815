"""Each party's training images and images per step, counted for `optim.steps_per_epoch: auto` and the plan
(fedmpi/config/epochs.py does the arithmetic). Synthetic parties are counted from their settings; rec and folder
parties are opened (their index or folder read, no image decoded)."""
from __future__ import annotations

from fedmpi.config.epochs import party_groups, rank_batch
from fedmpi.config.files import check_source
from fedmpi.errors import ConfigError


def party_images(spec, data_cfg, key: str) -> int:
    """Training images of one party's data source (its split or Dirichlet part, without data.heldout's)."""
    if spec.kind == "synthetic":
        count = len(range(spec.split_index * spec.identities // spec.split_count,
                          (spec.split_index + 1) * spec.identities // spec.split_count))
        images = count * spec.images_per_identity
        if spec.dirichlet_clients:   # each client of the partition holds floor(n / clients) (data/partition.py)
            images //= spec.dirichlet_clients
        return images - count * data_cfg.heldout
    from fedmpi.data.errors import DataError
    from fedmpi.data.sets import open_training_set

    check_source(spec.kind, spec.path, key)
    try:
        dataset = open_training_set(spec, data_cfg)
    except (DataError, OSError, ValueError) as exc:
        raise ConfigError(f"{key}: {exc}") from None
    return len(dataset) - dataset.num_classes * data_cfg.heldout


def party_sizes(cfg) -> dict[str, tuple[int, int]]:
    """{party of the layout: (training images, images per step)}; a ConfigError naming a party's data.path
    where its data cannot be read."""
    return {name: (sum(party_images(spec, cfg.data, f"parties.{source}.data.path")
                       for spec, source in zip(specs, sources)), ranks * rank_batch(cfg, name))
            for name, ranks, specs, sources in party_groups(cfg) if specs}
