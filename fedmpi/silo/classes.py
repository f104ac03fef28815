"""The class payloads of a rule that lets something of a party's class embeddings leave it (`Algorithm.class_payload`;
docs/ARCHITECTURE.md, "The round loop and its seams"; docs/BASELINES.md).

After its K local steps, in a round where the rule's payload is due, a party gathers its classifier's shards on
its leader (W_k, n_k x d, over the party group) and the leader sends, point to point over the leaders group after
θ_i, either W_k itself ("rows") or the summary the rule makes of it ("summary"). The server receives them while
the backbones travel, and after Θ went out it runs the rule's step: "rows" on the stacked W = [W_1; ...; W_P]
(each party's rows received straight into their block), then sends each party its own rows back, which its
leader splits over the party's shards again; "summary" relays to each party the other parties' summaries, which
its leader passes to the party's ranks: the rule's trainer state (`RECEIVED`, checkpointed) and the classifier's
extra negatives. Every byte of it is in the log's traffic columns (the gather and the split inside the party as
intra-party bytes)."""
from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from fedmpi import comm
from fedmpi.algorithms.class_steps import bounds_of
from fedmpi.comm import p2p
from fedmpi.comm.receives import ReceivesInBackground
from fedmpi.layout import SERVER, Party
from fedmpi.models.class_centres import shard_bounds
from fedmpi.models.cone_negatives import valid_cones

TAG_UP, TAG_DOWN = 2, 3          # gloo matches a pair's messages by tag: never those of the backbone (tag 0)
RECEIVED = "received"            # a "summary" rule's trainer-state key: the other parties' summaries


def party_rows(description: dict, parties: list[Party]) -> list[int]:
    """Each party's class count n_k from the data's description (its parts' identities added up)."""
    rows = []
    for party in parties:
        keys = [party.name] if len(party.specs) == 1 else [f"{party.name}.{i}" for i in range(len(party.specs))]
        rows.append(sum(int(description[key]["identities"]) for key in keys))
    return rows


def replicated(classifier_mode: str, ranks: int) -> bool:
    return classifier_mode == "replicated" and ranks > 1


class ServerClasses:
    """The server's side: the parties' class payloads of a round, the rule's step on them, the replies."""

    def __init__(self, rule, parties: list[Party], rows: list[int], d: int, leaders, device, dtype,
                 classifier_mode: str = "auto"):
        self.rule, self.leaders, self.dtype = rule, leaders, dtype
        self._leaders = [p.leader for p in parties]
        self.names = [p.name for p in parties]
        self._point_to_point_threads = torch.device(device).type == "cpu"
        P = len(parties)
        gathered = d * sum(n - shard_rows(n, len(p.ranks), classifier_mode) for n, p in zip(rows, parties))
        if rule.class_payload == "rows":
            self.W = torch.zeros(sum(rows), d, dtype=dtype, device=device)
            self.bounds = bounds_of(rows)
            self.uploads = [self.W[a:b] for a, b in self.bounds]
            self.replies = self.uploads                     # each party gets its own corrected rows back
            # the shards gathered on the leader and split from it again (a replicated party: the leader's broadcast)
            self._intra = 2 * gathered + d * sum(n * (len(p.ranks) - 1) for n, p in zip(rows, parties)
                                                 if replicated(classifier_mode, len(p.ranks)))
        else:
            q, width = rule.summary_shape(d)
            self.summaries = torch.zeros(P, q, width, dtype=dtype, device=device)
            self.replied = torch.zeros(P, (P - 1) * q, width, dtype=dtype, device=device)
            self.uploads, self.replies = list(self.summaries.unbind(0)), list(self.replied.unbind(0))
            # the shards gathered on the leader, the other parties' summaries broadcast to the party's ranks
            self._intra = gathered + sum(len(p.ranks) - 1 for p in parties) * (P - 1) * q * width
        self._sizes = (sum(u.numel() for u in self.uploads), sum(r.numel() for r in self.replies))
        self._work: list = []
        self.due = False
        self.row: dict | None = None     # the round's row of the log's `classes` table, when the step ran

    def post(self, r: int) -> None:
        self.due, self.row = self.rule.class_due(r), None
        if not self.due:
            return
        works = [p2p.irecv(u, src=leader, group=self.leaders, tag=TAG_UP) for u, leader in zip(self.uploads, self._leaders)]
        self._work = [ReceivesInBackground(works)] if self._point_to_point_threads else works

    def is_complete(self) -> bool:
        return all(work.is_completed() for work in self._work)

    def wait(self) -> None:
        with comm.naming_failures(f"receive of the class payloads over {comm.group_label('leaders', self.leaders)}"):
            for work in self._work:
                work.wait()
        self._work = []

    def step(self, r: int, lr: float, state: dict, excluded=None) -> None:
        """The rule's step on the round's payloads; then each party's reply is sent. `excluded`: [P] bool, the
        parties whose upload the server's check left out this round (aggregation/upload_check.py); they, and a
        party whose class payload is not finite, are left out of the step as well: their rows are neither
        corrected nor a negative of the others' (they get their own back), their summary is not relayed."""
        if not self.due:
            return
        self.answer(r, lr, state, excluded)
        with comm.naming_failures(f"send of the class payloads over {comm.group_label('leaders', self.leaders)}"):
            for work in [p2p.isend(reply, dst=leader, group=self.leaders, tag=TAG_DOWN)
                         for reply, leader in zip(self.replies, self._leaders)]:
                work.wait()

    def answer(self, r: int, lr: float, state: dict, excluded=None) -> None:
        """The replies of round r (`step`, before they are sent) and the round's log row."""
        left_out = self.left_out(excluded, r)
        if left_out.all():
            self.row = None
        elif self.rule.class_payload == "rows":
            self.row = {"round": r, **self.step_rows(~left_out, lr, r, state)}
        else:
            for k in np.flatnonzero(left_out):
                self.summaries[k].zero_()          # a row whose last value is 0 holds no cluster
            self.row = {"round": r, **self.rule.relay(self.summaries, self.replied, r, state)}

    def left_out(self, excluded, r: int | None = None) -> np.ndarray:
        """[P] bool: excluded by the upload check, or a class payload that is not finite (one reduction each; said
        in one line when round r is given)."""
        finite = torch.stack([torch.isfinite(u).all() for u in self.uploads]).cpu().numpy()
        if r is not None:
            for k in np.flatnonzero(~finite):
                print(f"round {r + 1}: the class payload of party {self.names[k]} is not finite: left out of the "
                      f"round's class step", flush=True)
        return ~finite | (np.zeros(len(self.uploads), bool) if excluded is None else np.asarray(excluded, bool))

    def step_rows(self, kept: np.ndarray, lr: float, r: int, state: dict) -> dict:
        """The rule's step on the kept parties' rows (all of W in place, or a copy of the kept ones written back)."""
        if kept.all():
            return self.rule.class_step(self.W, self.bounds, lr, r, state)
        parties = np.flatnonzero(kept)
        W = torch.cat([self.uploads[k] for k in parties])
        row = self.rule.class_step(W, bounds_of([self.uploads[k].shape[0] for k in parties]), lr, r, state)
        for k, (a, b) in zip(parties, bounds_of([self.uploads[k].shape[0] for k in parties])):
            self.uploads[k].copy_(W[a:b])
        return row

    def bytes_per_round(self) -> dict[str, int]:
        """The last round's class payloads: up to the server, down to the leaders, inside the parties."""
        if not self.due:
            return {"up": 0, "down": 0, "intra": 0}
        item = torch.empty((), dtype=self.dtype).element_size()
        return {"up": self._sizes[0] * item, "down": self._sizes[1] * item, "intra": self._intra * item}


def shard_rows(n: int, ranks: int, classifier_mode: str) -> int:
    """The rows the party's leader holds of its n class embeddings (its own shard's, or all when replicated)."""
    if ranks == 1 or replicated(classifier_mode, ranks):
        return n
    start, end = shard_bounds(n, ranks, 0)
    return end - start


class PartyClasses:
    """A trainer rank's side: its shard of W_k to the leader and the leader's payload to the server after the local
    steps (`upload`), the server's reply into the party after Θ (`download`)."""

    def __init__(self, rule, party: Party, rank: int, groups, classifier, optimizer, algo_state: dict, parties: int,
                 device, dtype):
        self.rule, self.party, self.rank, self.groups = rule, party, rank, groups
        self.classifier, self.optimizer, self.algo_state = classifier, optimizer, algo_state
        self.is_leader = rank == party.leader
        self.ranks = len(party.ranks)
        # the leader holds the whole W_k already (one rank, or a replicated classifier)
        self.whole = (classifier.class_start, classifier.class_end) == (0, classifier.num_classes)
        n, d = classifier.num_classes, classifier.embedding_size
        self.W = torch.zeros(n, d, dtype=dtype, device=device) if self.is_leader else None
        if rule.class_payload == "summary":
            q, width = rule.summary_shape(d)
            self.summary = torch.zeros(q, width, dtype=dtype, device=device) if self.is_leader else None
            algo_state[RECEIVED] = torch.zeros((parties - 1) * q, width, dtype=dtype, device=device)

    # ---- within the party
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
        with comm.naming_failures(f"gather of the class embeddings over {comm.group_label(self.party.name, self.groups.party)}"):
            dist.gather(mine, parts, dst=self.party.leader, group=self.groups.party)
        if self.is_leader:
            for (a, b), part in zip(blocks, parts):
                self.W[a:b] = part[:b - a]

    def _split(self) -> None:
        """The leader's W_k back into the party's shards (each rank its block; every rank all of it when replicated)."""
        weight = self.classifier.weight
        label = comm.group_label(self.party.name, self.groups.party)
        with torch.no_grad():
            if self.ranks == 1:
                weight.copy_(self.W)
            elif self.whole:
                received = self.W if self.is_leader else torch.empty_like(weight)
                with comm.naming_failures(f"broadcast of the class embeddings over {label}"):
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
                with comm.naming_failures(f"split of the class embeddings over {label}"):
                    dist.scatter(mine, parts, src=self.party.leader, group=self.groups.party)
                weight.copy_(mine[:weight.shape[0]])
        if self.rule.resets_class_momentum:
            for buffer in self.optimizer.momentum_buffers:
                if buffer is not None:
                    buffer.zero_()

    # ---- the round
    def upload(self, r: int) -> None:
        if not self.rule.class_due(r):
            return
        self._gather()
        if not self.is_leader:
            return
        payload = self.W
        if self.rule.class_payload == "summary":
            self.rule.summarise(self.W, self.summary, r, self.party.index, self.algo_state)
            payload = self.summary
        with comm.naming_failures(f"send of the class payload over {comm.group_label('leaders', self.groups.leaders)}"):
            p2p.send(payload, dst=SERVER, group=self.groups.leaders, tag=TAG_UP)

    def download(self, r: int) -> None:
        if not self.rule.class_due(r):
            return
        into = self.W if self.rule.class_payload == "rows" else self.algo_state[RECEIVED]
        if self.is_leader:
            with comm.naming_failures(f"receive of the class payload over {comm.group_label('leaders', self.groups.leaders)}"):
                p2p.recv(into, src=SERVER, group=self.groups.leaders, tag=TAG_DOWN)
        if self.rule.class_payload == "rows":
            self._split()
            return
        if self.ranks > 1:
            with comm.naming_failures(f"broadcast of the clusters over {comm.group_label(self.party.name, self.groups.party)}"):
                dist.broadcast(into, src=self.party.leader, group=self.groups.party)
        self.restored()

    def restored(self) -> None:
        """The classifier's extra negatives from the received summaries (after a download or a checkpoint)."""
        if self.rule.class_payload == "summary":
            self.classifier.negatives = valid_cones(self.algo_state[RECEIVED])
