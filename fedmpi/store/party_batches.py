"""A checkpoint's batches per step: what its manifest records of each party's batch per step (ranks x batch per
rank), and the changes a resume makes to them. The same batch on other rank counts continues the same run
(docs/CLUSTER.md); another batch is a change of the run, refused unless asked for."""
from __future__ import annotations

from pathlib import Path

from fedmpi.layout import rank_batch
from fedmpi.store.errors import ResumeError


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


def party_batch_changes(manifest: dict, saved_config: dict, cfg, layout) -> dict:
    """{'parties.NAME.images_per_step': [before, now]} for each party whose batch per step (ranks x batch per
    rank) differs from the checkpoint's: its data stream and its gradients differ then, whereas the same batch
    on other rank counts continues the same run (docs/CLUSTER.md)."""
    if cfg.cross_device:   # the clients' state lives on the server: any number of trainer ranks continues it
        return {}
    saved_ranks = manifest.get("topology", {}).get("parties", {})
    saved = saved_party_batches(manifest, saved_config)
    changes = {}
    for party in layout.parties:
        now = (len(party.ranks), rank_batch(cfg, party.name))
        before = saved.get(party.name)
        if before is not None and before != now[0] * now[1]:
            ranks = int(saved_ranks.get(party.name, 0))
            old = describe(ranks, before // ranks) if ranks and before % ranks == 0 else str(before)
            changes[f"parties.{party.name}.images_per_step"] = [old, describe(*now)]
    return changes


def check_party_batches(folder: Path, manifest: dict, saved_config: dict, cfg, layout, allowed: bool) -> dict:
    changes = party_batch_changes(manifest, saved_config, cfg, layout)
    if changes and not allowed:
        listed = "; ".join(f"party {key.split('.')[1]}: {old} images per step (ranks x batch per rank), this run "
                           f"{new}" for key, (old, new) in changes.items())
        raise ResumeError(f"--resume: {folder} was written with another batch per step ({listed}); keep the "
                          f"party's batch per step (parties.NAME.batch_size), or add --allow-config-changes to "
                          f"continue with the new one (recorded in the log)")
    return changes
