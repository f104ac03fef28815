"""A checkpoint re-split for another layout without a run (`python -m tools.reshard`): every party whose rank
count changes gets new parts (its classifier and momentum re-split, the rule's state in part 0, the loss scale,
the generators a resumed run would derive); the server's and the other parts are copied; the new manifest names
the new layout and keeps the parties' batches per step of the run that wrote it. A run on that layout then
resumes from the new folder as from one of its own."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from fedmpi.relayout.party_state import (
    read_party_parts,
    saved_rank_count,
    seed_generators,
    seed_of,
)
from fedmpi.relayout.shards import is_replicated, reshard
from fedmpi.store.manifest import (
    MANIFEST,
    ResumeError,
    check_complete,
    party_part,
    write_part,
)


def reshard_checkpoint(folder: Path, out: Path, cfg, layout) -> dict[str, tuple[int, int]]:
    """Write `out`, the checkpoint `folder` for `layout` (cfg: the config of the run that will resume it);
    returns {party: (ranks before, ranks now)} of the parties re-split."""
    from fedmpi.store.party_batches import saved_party_batches
    from fedmpi.store.resume import run_signature, saved_config
    from fedmpi.store.rng import capture_rng

    folder, out = Path(folder), Path(out)
    manifest = check_complete(folder)
    if out.exists():
        raise ResumeError(f"{out}: already exists; give a new folder with --out")
    batches = saved_party_batches(manifest, saved_config(folder))
    out.mkdir(parents=True)
    parts, changed = dict(manifest["parts"]), {}
    rounds_done = int(manifest["round"])
    for party in layout.parties:
        before, now = saved_rank_count(manifest, party.name), len(party.ranks)
        if before is None:
            raise ResumeError(f"{folder}: the checkpoint has no party {party.name}")
        if before == now:
            continue
        changed[party.name] = (before, now)
        trees = reshard(read_party_parts(folder, party.name, before), now,
                        is_replicated(cfg.model.classifier, before), is_replicated(cfg.model.classifier, now))
        for k in range(before):
            parts.pop(party_part(party.name, k))
        for k, tree in enumerate(trees):
            tree = {key: value for key, value in tree.items() if key != "_attrs"}
            seed_generators(seed_of(cfg.run.seed, party.index, rounds_done, k))
            tree["rng"] = capture_rng()
            written = write_part(out, party_part(party.name, k), tree,
                                 {"round": rounds_done, "step": int(manifest["step"])}, party.ranks[k])
            parts[written.name] = {"size": written.size, "sha256": written.sha256, "rank": written.rank,
                                   "node": written.node}
    for name in manifest["parts"]:
        if name in parts and not (out / name).exists():
            shutil.copy2(folder / name, out / name)
    meta = {**manifest, "topology": layout.as_dict(), "signature": run_signature(cfg, layout),
            "party_batches": batches, "resharded_from": str(folder), "parts": parts}
    (out / MANIFEST).write_text(json.dumps(meta, indent=1) + "\n")
    return changed

