"""How a class part's payloads travel (algorithms/class_parts.py; docs/ARCHITECTURE.md, "The round loop and its
seams"; docs/BASELINES.md), on a trainer rank; the server's side is silo/server_classes.py.

After its K local steps, in a round where the part's payload is due, a party gathers its classifier's shards on
its leader (W_k, n_k x d, over the party group) and the leader sends, point to point over the leaders group after
θ_i, either W_k itself (a RowsPart) or the summary the part makes of it (a SummaryPart). The server receives them
while the backbones travel, and after Θ went out it runs the part's step: on the stacked W = [W_1; ...; W_P] (each
party's rows received straight into their block), then sends each party its own rows back, which its leader
splits over the party's shards again; or the relay to each party of the other parties' summaries, which its
leader passes to the party's ranks: the rule's trainer state (`RECEIVED`, checkpointed) and the classifier's
extra negatives. Every byte of it is in the log's traffic columns (the gather and the split inside the party as
intra-party bytes). A part picks its transport from `PartyKit` (core/class_kit.py): nothing, the rows, or the
summaries; the kit holds where W_k lives (the party's classifier shards) and how it moves (the party and leaders
groups)."""
from __future__ import annotations

import torch
import torch.distributed as dist

from fedmpi import comm
from fedmpi.comm import p2p
from fedmpi.comm.tags import CLASS_DOWN as TAG_DOWN, CLASS_UP as TAG_UP
from fedmpi.core.class_kit import ClassKit, NoClassPayload
from fedmpi.layout import SERVER, Party
from fedmpi.models.class_centres import shard_bounds
from fedmpi.models.cone_negatives import valid_cones

RECEIVED = "received"            # a summary part's trainer-state key: the other parties' summaries


def party_rows(description: dict, parties: list[Party]) -> list[int]:
    """Each party's class count n_k from the data's description (its parts' identities added up)."""
    rows = []
    for party in parties:
        keys = [party.name] if len(party.specs) == 1 else [f"{party.name}.{i}" for i in range(len(party.specs))]
        rows.append(sum(int(description[key]["identities"]) for key in keys))
    return rows


def replicated(classifier_mode: str, ranks: int) -> bool:
    return classifier_mode == "replicated" and ranks > 1


def shard_rows(n: int, ranks: int, classifier_mode: str) -> int:
    """The rows the party's leader holds of its n class embeddings (its own shard's, or all when replicated)."""
    if ranks == 1 or replicated(classifier_mode, ranks):
        return n
    start, end = shard_bounds(n, ranks, 0)
    return end - start


class PartyClasses(NoClassPayload):
    """Its shard of W_k to the leader and the leader's payload to the server after the local steps (`upload`),
    the server's reply into the party after Θ (`download`)."""

    def __init__(self, part, kit: PartyKit):
        self.part, self.party, self.rank, self.groups = part, kit.party, kit.rank, kit.groups
        self.classifier, self.optimizer, self.algo_state = kit.classifier, kit.optimizer, kit.algo_state
        self.is_leader = kit.rank == kit.party.leader
        self.ranks = len(kit.party.ranks)
        classifier = kit.classifier
        # the leader holds the whole W_k already (one rank, or a replicated classifier)
        self.whole = (classifier.class_start, classifier.class_end) == (0, classifier.num_classes)
        n, d = classifier.num_classes, classifier.embedding_size
        self.W = torch.zeros(n, d, dtype=kit.dtype, device=kit.device) if self.is_leader else None
        self.label = comm.group_label(self.party.name, self.groups.party)
        self.short_rows = kit.short_rows      # a bad party's payload that many rows short (parties.NAME.attack)

    def _blocks(self) -> list[tuple[int, int]]:
        return [shard_bounds(self.classifier.num_classes, self.ranks, i) for i in range(self.ranks)]

    def _gather(self) -> None:
        """W_k on the leader from the party's shards (padded to the longest block for the collective)."""
        weight = self.classifier.weight.detach()
        if self.whole:
            if self.is_leader:
                self.W.copy_(weight)
            return
        blocks = self._blocks()
        width = max(b - a for a, b in blocks)
        mine = torch.zeros(width, weight.shape[1], dtype=weight.dtype, device=weight.device)
        mine[:weight.shape[0]] = weight
        parts = [torch.empty_like(mine) for _ in blocks] if self.is_leader else None
        with comm.naming_failures(f"gather of the class embeddings over {self.label}"):
            dist.gather(mine, parts, dst=self.party.leader, group=self.groups.party)
        if self.is_leader:
            for (a, b), part in zip(blocks, parts):
                self.W[a:b] = part[:b - a]

    def payload(self, r: int) -> torch.Tensor:
        """What the leader sends of its gathered W_k."""
        return self.W

    def upload(self, r: int) -> None:
        if not self.part.due(r):
            return
        self._gather()
        if not self.is_leader:
            return
        payload = self.payload(r)
        payload = payload[:max(payload.shape[0] - self.short_rows, 0)]
        with comm.naming_failures(f"send of the class payload over {comm.group_label('leaders', self.groups.leaders)}"):
            p2p.send(payload, dst=SERVER, group=self.groups.leaders, tag=TAG_UP)

    def receive(self, into: torch.Tensor) -> None:
        """The server's reply into the leader's `into`."""
        if self.is_leader:
            with comm.naming_failures(f"receive of the class payload over {comm.group_label('leaders', self.groups.leaders)}"):
                p2p.recv(into, src=SERVER, group=self.groups.leaders, tag=TAG_DOWN)


class PartyRows(PartyClasses):
    """W_k to the server, its corrected rows back into the party's shards."""

    def download(self, r: int) -> None:
        """The server's rows into the party; a reply that is not finite is the server's word that it left the
        party's payload out (silo/server_classes.py): the leader keeps the rows it sent, its last good ones."""
        if not self.part.due(r):
            return
        if self.is_leader:
            reply = torch.empty_like(self.W)
            self.receive(reply)
            if bool(torch.isfinite(reply).all()):
                self.W.copy_(reply)
        self._split()

    def _split(self) -> None:
        """The leader's W_k back into the party's shards (each rank its block; every rank all of it when replicated)."""
        weight = self.classifier.weight
        with torch.no_grad():
            if self.ranks == 1:
                weight.copy_(self.W)
            elif self.whole:
                received = self.W if self.is_leader else torch.empty_like(weight)
                with comm.naming_failures(f"broadcast of the class embeddings over {self.label}"):
                    dist.broadcast(received, src=self.party.leader, group=self.groups.party)
                weight.copy_(received)
            else:
                blocks = self._blocks()
                width = max(b - a for a, b in blocks)
                mine = torch.empty(width, weight.shape[1], dtype=weight.dtype, device=weight.device)
                parts = None
                if self.is_leader:
                    parts = [torch.zeros_like(mine) for _ in blocks]
                    for (a, b), part in zip(blocks, parts):
                        part[:b - a] = self.W[a:b]
                with comm.naming_failures(f"split of the class embeddings over {self.label}"):
                    dist.scatter(mine, parts, src=self.party.leader, group=self.groups.party)
                weight.copy_(mine[:weight.shape[0]])
        if self.part.resets_momentum:
            for buffer in self.optimizer.momentum_buffers:
                if buffer is not None:
                    buffer.zero_()


class PartySummaries(PartyClasses):
    """The leader's summary of W_k to the server; the other parties' summaries, kept by every rank of the party
    (the rule's trainer state) as its classifier's extra negatives."""

    def __init__(self, part, kit: PartyKit):
        super().__init__(part, kit)
        q, width = part.summary_shape(self.classifier.embedding_size)
        self.summary = torch.zeros(q, width, dtype=kit.dtype, device=kit.device) if self.is_leader else None
        kit.algo_state[RECEIVED] = torch.zeros((kit.parties - 1) * q, width, dtype=kit.dtype, device=kit.device)

    def payload(self, r):
        self.part.summarise(self.W, self.summary, r, self.party.index, self.algo_state)
        return self.summary

    def download(self, r: int) -> None:
        if not self.part.due(r):
            return
        into = self.algo_state[RECEIVED]
        self.receive(into)
        if self.ranks > 1:
            with comm.naming_failures(f"broadcast of the clusters over {self.label}"):
                dist.broadcast(into, src=self.party.leader, group=self.groups.party)
        self.restored()

    def restored(self) -> None:
        """The classifier's extra negatives from the received summaries (after a download or a checkpoint)."""
        self.classifier.negatives = valid_cones(self.algo_state[RECEIVED])


class PartyKit(ClassKit):
    """What a trainer rank's transports share: its party and place, the party's classifier and its optimizer,
    the rule's trainer state, the number of parties."""

    def __init__(self, party: Party, rank: int, groups, classifier, optimizer, algo_state: dict, parties: int,
                 device, dtype, short_rows: int = 0):
        self.party, self.rank, self.groups, self.short_rows = party, rank, groups, short_rows
        self.classifier, self.optimizer, self.algo_state = classifier, optimizer, algo_state
        self.parties, self.device, self.dtype = parties, device, dtype
        self.Nothing, self.Rows, self.Summaries = NoClassPayload, PartyRows, PartySummaries
