"""A party's batch per rank and per step. The party's global batch (ranks x batch per rank) is what its data
stream and its gradients depend on; the split over ranks is the layout's, which a resume may change."""
from __future__ import annotations


def rank_batch(cfg, party_name: str) -> int:
    """Images per rank and step of party `party_name`: its `parties.NAME.batch_size`, else optim.batch_size
    (also for the merged party of fed.setting=centralized and the cross-device clients)."""
    for p in cfg.parties:
        if p.name == party_name and p.batch_size:
            return int(p.batch_size)
    return int(cfg.optim.batch_size)


def party_batches(cfg, layout) -> dict[str, int]:
    """{party: images per step of the whole party} for the layout's parties."""
    return {p.name: len(p.ranks) * rank_batch(cfg, p.name) for p in layout.parties}


def describe(ranks: int, per_rank: int) -> str:
    return f"{ranks} x {per_rank} = {ranks * per_rank}"


def saved_party_batches(manifest: dict, saved_config: dict) -> dict[str, int]:
    """{party: images per step} of the run that wrote a checkpoint: the manifest's `party_batches`, else (a
    checkpoint of the earlier format) its rank counts times the saved config's batch per rank."""
    if "party_batches" in manifest:
        return {k: int(v) for k, v in manifest["party_batches"].items()}
    default = saved_config.get("optim", {}).get("batch_size")
    per_rank = {p.get("name"): p.get("batch_size") or default for p in saved_config.get("parties", [])}
    return {name: int(count) * int(per_rank.get(name, default))
            for name, count in manifest.get("topology", {}).get("parties", {}).items()
            if per_rank.get(name, default) is not None}
