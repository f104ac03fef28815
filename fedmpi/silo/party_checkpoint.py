"""A silo trainer rank's part of a checkpoint (fedmpi.store.checkpoint) and its restore, on the same rank count
or on another (fedmpi/relayout)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fedmpi.store.checkpoint import capture_rng, copy_into, party_part, read_part, restore_rng


@dataclass
class PartyCheckpoint:
    """What silo/trainer.py's Trainer keeps of a round: its classifier shard, the loss scale, its RNGs, the
    rule's trainer state (with the local objective's and the class part's). `node`: the party's node share (the
    rule's `global_state` one copy per node), or None; `classes`: the class part's party side, told when its
    state was restored; `seed`: run.seed; `classifier_mode`: model.classifier."""
    party: Any
    rank: int
    classifier: Any
    classifier_opt: Any
    precision: Any
    algo_state: dict
    global_state: tuple
    node: Any
    classes: Any
    seed: int
    classifier_mode: str

    @property
    def is_leader(self) -> bool:
        return self.rank == self.party.leader

    @property
    def keeps(self) -> bool:
        return self.node is None or self.node.keeps

    def parts(self) -> dict:
        """This rank's part of a checkpoint (fedmpi.store.checkpoint): its classifier shard and the shard's
        optimizer state, the loss scale, its RNGs; the leader also the rule's trainer state (the same on every
        rank of the party: PFM's M, local momentum), which never leaves the party."""
        tree = {"classifier": self.classifier.state_dict(), "classifier_optimizer": self.classifier_opt.state_dict(),
                "precision": self.precision.state_dict(),
                "rng": capture_rng()}
        if self.is_leader:
            tree["algorithm"] = self.algo_state
        return {party_part(self.party.name, self.party.ranks.index(self.rank)): tree}

    def load(self, folder) -> int:
        """Take this rank's state from a checkpoint written by `parts`, by this party on this rank count
        or on another (fedmpi/relayout: the classifier's blocks re-split, generators derived); returns the round
        to continue at (the global Θ came with the server's first broadcast)."""
        from fedmpi.relayout.party_state import relaid_part, saved_rank_count, seed_generators, seed_of
        from fedmpi.store.manifest import read_manifest

        index, ranks = self.party.ranks.index(self.rank), len(self.party.ranks)
        saved_ranks = saved_rank_count(read_manifest(folder), self.party.name) or ranks
        if saved_ranks == ranks:
            saved = read_part(folder / party_part(self.party.name, index))
        else:
            saved = relaid_part(folder, self.party.name, saved_ranks, ranks, index, self.classifier_mode)
        self.classifier.load_state_dict(saved["classifier"])
        self.classifier_opt.load_state_dict(saved["classifier_optimizer"])
        self.precision.load_state_dict(saved["precision"])
        leader = saved if "algorithm" in saved else read_part(folder / party_part(self.party.name, 0), ("algorithm",))
        targets = self.algo_state
        if not self.keeps:   # the keeper restores what the party's ranks on its node share
            targets = {k: torch.empty_like(v) if k in self.global_state else v for k, v in targets.items()}
        copy_into(targets, leader["algorithm"], "algorithm")
        self.classes.restored()
        if self.node:
            self.node.wait_for_party("the rule's state from the checkpoint")
        rounds_done = int(saved["_attrs"]["round"])
        if saved_ranks == ranks:
            restore_rng(saved["rng"])
        else:
            seed_generators(seed_of(self.seed, self.party.index, rounds_done, index))
        return rounds_done
