"""The server's side of a class part's payloads (silo/classes.py says how they travel): the parties' payloads of a
round, received while the backbones travel, the part's arithmetic on them after Θ went out, the replies. A part
picks its transport from `ServerKit` (core/class_kit.py): nothing (core/seams.py's NoClasses), the rows, or the
summaries; the kit holds where W lives on the server (the parties' blocks of the stacked W, received from their
leaders) and how it moves (the leaders group)."""
from __future__ import annotations

import numpy as np
import torch

from fedmpi import comm
from fedmpi.aggregation.class_payload_check import left_out as judged
from fedmpi.algorithms.class_steps import bounds_of
from fedmpi.comm import p2p
from fedmpi.comm.marked_receives import MarkedReceives
from fedmpi.core.class_kit import ClassKit
from fedmpi.core.seams import NoClasses
from fedmpi.core.server_rows import kept_rows, step_kept
from fedmpi.layout import Party
from fedmpi.silo.classes import TAG_DOWN, TAG_UP, replicated, shard_rows


class ServerKit(ClassKit):
    """What the server's transports share: the parties, their class counts n_k (`rows`), the embedding size d."""

    def __init__(self, parties: list[Party], rows: list[int], d: int, leaders, device, dtype,
                 classifier_mode: str = "auto", norm_ratio: float = 10.0):
        self.parties, self.counts, self.d, self.leaders = parties, rows, d, leaders
        self.norm_ratio = norm_ratio          # fed.upload_check.norm_ratio, for the class payloads too
        self.device, self.dtype, self.classifier_mode = device, dtype, classifier_mode
        # the shards gathered on each leader (the padded blocks of the party's other ranks)
        self.gathered = d * sum(n - shard_rows(n, len(p.ranks), classifier_mode) for n, p in zip(rows, parties))
        self.Nothing, self.Rows, self.Summaries = NoClasses, ServerRows, ServerSummaries


class ServerClasses:
    """A round's payloads: `uploads` (one per party) received, `replies` sent back."""
    uploads: list
    replies: list
    _intra: int

    def __init__(self, part, kit: ServerKit):
        self.part, self.leaders, self.dtype, self.norm_ratio = part, kit.leaders, kit.dtype, kit.norm_ratio
        self._leaders = [p.leader for p in kit.parties]
        self.names = [p.name for p in kit.parties]
        self.receives = MarkedReceives(kit.device)
        self.due = False
        self.row: dict | None = None     # the round's row of the log's `classes` table, when the step ran

    def _sized(self) -> None:
        self._sizes = (sum(u.numel() for u in self.uploads), sum(r.numel() for r in self.replies))

    def post(self, r: int) -> None:
        self.due, self.row = self.part.due(r), None
        if not self.due:
            return
        # a payload shorter than n_k x d (or the summary's shape) leaves its buffer's end marked (left_out)
        self.receives.post(self.uploads, self._leaders, self.leaders, TAG_UP)

    def is_complete(self) -> bool:
        return self.receives.is_complete()

    def wait(self) -> None:
        with comm.naming_failures(f"receive of the class payloads over {comm.group_label('leaders', self.leaders)}"):
            self.receives.wait()

    def step(self, r: int, lr: float, state: dict, excluded=None) -> None:
        """The part's step on the round's payloads; then each party's reply is sent. `excluded`: [P] bool, the
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
        self.row = None if left_out.all() else {"round": r, **self.answer_kept(left_out, lr, r, state)}
        self.no_reply(left_out)

    def no_reply(self, left_out: np.ndarray) -> None:
        """What a left-out party is sent back (the rows: its own kept; the summaries: the others' as usual)."""

    def answer_kept(self, left_out: np.ndarray, lr: float, r: int, state: dict) -> dict:
        raise NotImplementedError

    def left_out(self, excluded, r: int | None = None) -> np.ndarray:
        """[P] bool: excluded by the upload check, or a class payload that is shorter than its buffer
        (comm/message_end.py), not finite or out of range among the others (aggregation/class_payload_check.py);
        said in one line each when round r is given."""
        why = judged(self.uploads, self.norm_ratio)
        if r is not None:
            for name, reason in zip(self.names, why):
                if reason:
                    print(f"round {r + 1}: the class payload of party {name} is {reason}: left out of the round's "
                          f"class step", flush=True)
        bad = np.array([reason is not None for reason in why], dtype=bool)
        return bad | (np.zeros(len(self.uploads), bool) if excluded is None else np.asarray(excluded, bool))

    def bytes_per_round(self) -> dict[str, int]:
        """The last round's class payloads: up to the server, down to the leaders, inside the parties."""
        if not self.due:
            return {"up": 0, "down": 0, "intra": 0}
        item = torch.empty((), dtype=self.dtype).element_size()
        return {"up": self._sizes[0] * item, "down": self._sizes[1] * item, "intra": self._intra * item}


class ServerRows(ServerClasses):
    """Every party's rows, received straight into their block of the stacked W; each party gets its own back."""

    def __init__(self, part, kit: ServerKit):
        super().__init__(part, kit)
        rows, d = kit.counts, kit.d
        self.W = torch.zeros(sum(rows), d, dtype=kit.dtype, device=kit.device)
        self.bounds = bounds_of(rows)
        self.uploads = [self.W[a:b] for a, b in self.bounds]
        self.replies = self.uploads                     # each party gets its own corrected rows back
        # the shards gathered on the leader and split from it again (a replicated party: the leader's broadcast)
        self._intra = 2 * kit.gathered + d * sum(n * (len(p.ranks) - 1) for n, p in zip(rows, kit.parties)
                                                 if replicated(kit.classifier_mode, len(p.ranks)))
        self._sized()

    def answer_kept(self, left_out, lr, r, state):
        return self.step_rows(~left_out, lr, r, state)

    def recorded(self) -> dict:
        """Every party's rows as uploaded (row i of party k: its identity i), for core/received.py."""
        if not self.due:
            return {}
        return {"class_rows": self.W, **senders([b - a for a, b in self.bounds])}

    def no_reply(self, left_out: np.ndarray) -> None:
        for k in np.flatnonzero(left_out):
            self.uploads[k].fill_(float("nan"))    # not a reply: the party keeps its own rows (silo/classes.py)

    def step_rows(self, kept: np.ndarray, lr: float, r: int, state: dict) -> dict:
        """The part's step on the kept parties' rows (core/server_rows.py: all of W in place, or a copy of the kept
        ones written back)."""
        counts = [b - a for (a, b), k in zip(self.bounds, kept) if k]
        return step_kept(self.W, kept_rows(self.bounds, kept),
                         lambda W: self.part.step(W, bounds_of(counts), lr, r, state))[1]


class ServerSummaries(ServerClasses):
    """Every party's summary; each party gets the other parties' summaries, in party order."""

    def __init__(self, part, kit: ServerKit):
        super().__init__(part, kit)
        P = len(kit.parties)
        q, width = part.summary_shape(kit.d)
        self.summaries = torch.zeros(P, q, width, dtype=kit.dtype, device=kit.device)
        self.replied = torch.zeros(P, (P - 1) * q, width, dtype=kit.dtype, device=kit.device)
        self.uploads, self.replies = list(self.summaries.unbind(0)), list(self.replied.unbind(0))
        # the shards gathered on the leader, the other parties' summaries broadcast to the party's ranks
        self._intra = kit.gathered + sum(len(p.ranks) - 1 for p in kit.parties) * (P - 1) * q * width
        self._sized()

    def answer_kept(self, left_out, lr, r, state):
        for k in np.flatnonzero(left_out):
            self.summaries[k].zero_()          # a row whose last value is 0 holds no cluster
        return self.part.relay(self.summaries, self.replied, r, state)

    def recorded(self) -> dict:
        """Every party's summary as uploaded (for PrivacyFace Q rows [p | α | released]), for core/received.py."""
        if not self.due:
            return {}
        q = self.summaries.shape[1]
        return {"clusters": self.summaries.reshape(-1, self.summaries.shape[2]),
                "cluster_sender": torch.arange(len(self.summaries)).repeat_interleave(q)}


def senders(counts: list[int]) -> dict:
    """Who sent each of the stacked rows (the party's index) and which of its identities the row is."""
    return {"class_row_sender": torch.arange(len(counts)).repeat_interleave(torch.as_tensor(counts)),
            "class_row_label": torch.cat([torch.arange(n) for n in counts])}
