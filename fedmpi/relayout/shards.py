"""A party's classifier across its checkpoint parts: merged into one tree, and split again for another rank
count. Class centres are split in contiguous blocks (`models.class_centres.shard_bounds`, the first C mod n
blocks one row longer), so merging is a concatenation in part order and splitting a slice, bit for bit; the
momentum buffers go with their rows. What every rank of a party holds alike (a replicated classifier, the
partial-FC step counter, the loss scale, the rule's state on the leader) is taken from part 0."""
from __future__ import annotations

from fedmpi.models.class_centres import shard_bounds

ROWS = "classifier", "classifier_optimizer"


def is_replicated(classifier_mode: str, ranks: int) -> bool:
    """Whether a party of `ranks` ranks holds the whole classifier on every rank (model.classifier)."""
    return classifier_mode == "replicated" and ranks > 1


def _momentum(part: dict) -> dict:
    return part.get("classifier_optimizer", {}).get("state", {})


def merge_parts(parts: list[dict], replicated: bool) -> dict:
    """One tree of the party's parts (in part order, k = 0, 1, ...) whose classifier and momentum hold every
    class: part 0's tree with the row blocks of all parts concatenated (part 0's alone when replicated)."""
    import torch

    merged = dict(parts[0])
    if replicated or len(parts) == 1:
        return merged
    merged["classifier"] = {**parts[0]["classifier"],
                            "weight": torch.cat([p["classifier"]["weight"] for p in parts])}
    state = {}
    for index, entry in _momentum(parts[0]).items():
        buffers = [_momentum(p).get(index, {}).get("momentum_buffer") for p in parts]
        if any(b is None for b in buffers):
            raise ValueError(f"classifier momentum {index}: some parts of the party have none")
        state[index] = {**entry, "momentum_buffer": torch.cat(buffers)}
    merged["classifier_optimizer"] = {**parts[0]["classifier_optimizer"], "state": state}
    return merged


def split_part(merged: dict, shards: int, index: int, replicated: bool) -> dict:
    """The tree of part `index` of `shards` from a merged one: its block of rows [start, end) of the classifier
    and of its momentum (the whole classifier when replicated); `algorithm` (the rule's trainer state) only in
    part 0, as a run writes it."""
    part = {key: value for key, value in merged.items() if key != "algorithm" or index == 0}
    if replicated or shards == 1:
        return part
    weight = merged["classifier"]["weight"]
    start, end = shard_bounds(weight.shape[0], shards, index)
    part["classifier"] = {**merged["classifier"], "weight": weight[start:end].clone()}
    state = {i: {**entry, "momentum_buffer": entry["momentum_buffer"][start:end].clone()}
             for i, entry in _momentum(merged).items()}
    part["classifier_optimizer"] = {**merged["classifier_optimizer"], "state": state}
    return part


def reshard(parts: list[dict], shards: int, replicated_before: bool, replicated_after: bool) -> list[dict]:
    """The party's parts for `shards` ranks from its parts for len(parts) ranks."""
    merged = merge_parts(parts, replicated_before)
    return [split_part(merged, shards, k, replicated_after) for k in range(shards)]
