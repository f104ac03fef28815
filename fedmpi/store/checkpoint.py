"""Checkpoints: one folder per checkpoint, one HDF5 part per writing rank, and a manifest that makes it whole.

Layout of `<checkpoint.dir>/round_000012/` (12 = rounds completed; the run resumes at round index 12):
  server.h5             written by the server: /theta (flat Θ), /algorithm (the rule's server state, e.g.
                        FedAvgM's v), /w (silo), /side_work (FV's state, when there is one), /exchange (the
                        cross-device sampler and clients' states), /rng, /config (YAML); parts of earlier
                        formats are read as today's by store/upgrade.py
  party-<name>-<k>.h5   written by rank k of party <name>: /classifier (its shard), /classifier_optimizer
                        (momentum buffers), /precision, /rng; the leader (k = 0) also /algorithm (the rule's
                        trainer state: PFM's M, local momentum), which every rank of the party reads back
  manifest.json         written by the server last, after every part is on disk: each part's size and sha256
Root attributes of every part: format, version, round, step.

This module is the collective writing step (`Checkpointer`); the pieces live beside it and are re-exported here:
`tree` (values <-> HDF5), `rng` (generator states), `manifest` (parts, manifests, finding, pruning), `resume`
(which checkpoint a launch continues, lineage).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from fedmpi.store.disk_full import DiskFull
from fedmpi.store.manifest import (FORMAT, MANIFEST, ROUND_FOLDER, SERVER_PART, VERSION, Part,  # noqa: F401
                                   ResumeError, check_complete, latest_complete, list_checkpoints, party_part,
                                   prune, read_manifest, read_part, remove_checkpoint, resolve_checkpoint,
                                   round_folder_name, write_manifest, write_part)
from fedmpi.store.resume import (ResumePoint, check_compatible, checkpoint_dir, find_resume_point,  # noqa: F401
                                 release_log, run_signature)
from fedmpi.store.rng import capture_rng, configure_determinism, restore_rng  # noqa: F401
from fedmpi.store.tree import copy_into, read_tree, write_tree  # noqa: F401


class Checkpointer:
    """The round-boundary step that server and trainers run together over `comm` (server = rank 0):
    agree on preemption, and when a checkpoint is due every rank writes its parts, the server the manifest.

    preemption(comm): collective, the name of a preemption signal any rank received ('' when none)."""

    def __init__(self, comm, directory: Path, cfg, layout, preemption: Callable[[object], str],
                 stream=sys.stdout):
        self.comm, self.directory, self.cfg, self.preemption = comm, Path(directory), cfg, preemption
        self.is_root = comm.Get_rank() == 0
        from fedmpi.layout import party_batches

        self.meta = {"algorithm": cfg.fed.algorithm, "topology": layout.as_dict(),
                     "signature": run_signature(cfg, layout), "party_batches": party_batches(cfg, layout)}
        self.stream = stream

    def round_end(self, rounds_done: int, parts: Callable[[], dict[str, dict]]) -> bool:
        """Call on every rank after each round; True when the run must stop for preemption (checkpoint written).
        `parts()` gives this rank's {part name: tree}, evaluated only when a checkpoint is written."""
        from fedmpi.comm import naming_failures

        every, rounds = self.cfg.checkpoint.every, self.cfg.rounds
        with naming_failures(f"round {rounds_done}"):
            signal = self.preemption(self.comm)
        preempted = bool(signal) and rounds_done < rounds
        if preempted or (every and (rounds_done % every == 0 or rounds_done == rounds)):
            with naming_failures(f"round {rounds_done}"):
                folder = self.save(rounds_done, parts())
            if preempted and self.is_root:
                self.stream.write(f"preempted ({signal}): stopped after round {rounds_done}/{self.cfg.rounds} "
                                  f"with checkpoint {folder}; continue with --resume auto\n")
                self.stream.flush()
        return preempted

    def save(self, rounds_done: int, parts: dict[str, dict]) -> Path:
        from fedmpi import comm as mpicomm

        folder = self.directory / round_folder_name(rounds_done)
        bounded = {"timeout_s": self.cfg.run.collective_timeout_s, "comm": self.comm}
        step = rounds_done * self.cfg.fed.K
        if self.is_root:  # before any part is written: a stale manifest must not vouch for new parts
            folder.mkdir(parents=True, exist_ok=True)
            (folder / MANIFEST).unlink(missing_ok=True)
            for leftover in folder.glob(".*.tmp*"):  # from an attempt that died while writing
                leftover.unlink(missing_ok=True)
        mpicomm.bcast(None, what="checkpoint go-ahead (server + trainers)", **bounded)
        rank = self.comm.Get_rank()
        try:
            written = [write_part(folder, name, tree, {"round": rounds_done, "step": step}, rank)
                       for name, tree in parts.items()]
        except DiskFull as exc:    # said once, by the server, after every rank has tried: not a failed collective
            written = exc
        everyone = mpicomm.gather(written, what="checkpoint parts written (server + trainers)", **bounded)
        if self.is_root:
            full = [str(w) for w in everyone if isinstance(w, DiskFull)]
            if full:
                self.disk_full(folder, rounds_done, full)
            all_parts = [p for ps in everyone for p in ps]
            try:
                write_manifest(folder, rounds_done, step, all_parts, self.meta)
            except DiskFull as exc:
                self.disk_full(folder, rounds_done, [str(exc)])
            prune(self.directory, self.cfg.checkpoint.keep, written=folder)
            size = sum(p.size for p in all_parts)
            self.stream.write(f"  checkpoint {folder} ({len(all_parts)} parts, {size / 2**20:.1f} MiB)\n")
            self.stream.flush()
        return folder

    def disk_full(self, folder: Path, rounds_done: int, failures: list[str]) -> None:
        """End the run in one line: the checkpoint of round `rounds_done` did not fit on its volume. Its folder is
        removed (it can never be resumed from, and it holds space); the newest complete one is kept and named."""
        remove_checkpoint(folder)
        newest = latest_complete(self.directory)
        kept = (f"the newest complete checkpoint, {newest}, is intact (--resume auto continues from it)" if newest
                else "no complete checkpoint was written")
        raise DiskFull(f"round {rounds_done}: the disk is full: the checkpoint {folder} could not be written "
                       f"({failures[0]}{f'; {len(failures) - 1} more ranks likewise' if len(failures) > 1 else ''}); "
                       f"{kept}; free space there or set checkpoint.dir")
