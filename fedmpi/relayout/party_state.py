"""A trainer rank's state from a checkpoint written by its party on another rank count: the party's parts
merged and this rank's block cut out (`shards`), and the generators a rank of the new layout starts from."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from fedmpi.relayout.shards import merge_parts, split_part
from fedmpi.store.manifest import party_part, read_part


def saved_rank_count(manifest: dict, party: str) -> int | None:
    """How many ranks party `party` had in the run that wrote the checkpoint (None: the manifest does not say)."""
    count = manifest.get("topology", {}).get("parties", {}).get(party)
    return int(count) if count is not None else None


def read_party_parts(folder: Path, party: str, count: int) -> list[dict]:
    return [read_part(Path(folder) / party_part(party, k)) for k in range(count)]


def relaid_part(folder: Path, party: str, saved_ranks: int, ranks: int, index: int, classifier_mode: str) -> dict:
    """Part `index` of party `party` on `ranks` ranks, from its `saved_ranks` parts in `folder`."""
    from fedmpi.relayout.shards import is_replicated

    merged = merge_parts(read_party_parts(folder, party, saved_ranks), is_replicated(classifier_mode, saved_ranks))
    return split_part(merged, ranks, index, is_replicated(classifier_mode, ranks))


def seed_of(run_seed: int, party_index: int, rounds_done: int, rank_in_party: int) -> int:
    """The seed of a rank's generators after a relayout: a rank's own stream cannot carry over to a layout
    where the ranks are others, so it is derived from what the party's state defines (the run's seed, the
    party, the round it continues at, the rank's place in the party)."""
    return int(np.random.SeedSequence([run_seed, party_index, rounds_done, rank_in_party]).generate_state(1)[0])


def seed_generators(seed: int) -> None:
    """torch's (and the current GPU's), numpy's legacy and Python's generators from one seed."""
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)   # seeds every GPU's generator too
