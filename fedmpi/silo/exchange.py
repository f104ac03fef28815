"""The round's exchange, as flat buffers over torch.distributed (see docs/ARCHITECTURE.md, "The round loop").

An upload is `[θ_i (D) | the rule's up payloads (n each) | the training's upload columns (1 each)]`, the global
payload `[Θ (D) | down payloads]`.
Up:   party leaders -> server over the leaders group into a [P, D_up] buffer kept across rounds (two alternating
      when FV reads the previous round's rows while the next land): on CPU each upload received straight into
      its row, on GPUs a gather.
Down: server -> leaders (broadcast over the leaders group), then leader -> its party's ranks (broadcast over
      the party group, which stays inside the party's nodes).
Statistics: every trainer rank sends its round's numbers to the server over MPI.
Weights: a training with the upload column `weight` (FedFR) writes its party's weight there; the server's w is
that column of the gathered rows, normalised.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from fedmpi import comm
from fedmpi.comm.receives import ReceivesInBackground
from fedmpi.aggregation.party_rows import PartyRows
from fedmpi.comm.node_share import keepers
from fedmpi.core.context import Control, Groups
from fedmpi.core.seams import RoundStats, round_statistics
from fedmpi.core.secure_participant import secure_or_plain
from fedmpi.layout import SERVER, Layout, Party, party_batches


class SiloExchange:
    """The server's side: every party's leader uploads each round (the silo setting) over the `leaders` group.
    `kept`: how many earlier rounds' rows stay untouched while the next gather lands (what the side work declares
    it reads); `intra_receivers`: the ranks each global payload reaches inside the parties (bytes_per_round)."""

    participation = 1.0
    gives_uploads = True

    def __init__(self, parties: list[Party], leaders, control: Control, up_numel: int, down_numel: int, device,
                 dtype, kept: int = 0, intra_receivers: int = 0, columns: tuple[str, ...] = ()):
        """columns: the upload columns after each [θ_i | up payloads] (LocalTraining.upload_columns), up_numel
        not counting them."""
        self.leaders, self.control, self.dtype = leaders, control, dtype
        self._columns = columns
        self._point_to_point = uploads_point_to_point(device)
        # made on the first post: an exchange wrapped by one that takes the uploads itself (core/secure_exchange.py)
        # never holds the rows
        self._new_buffers = lambda: [PartyRows(len(parties), up_numel, dtype=dtype, device=device,
                                               columns=len(columns), lead=0 if self._point_to_point else 1)
                                     for _ in range(1 + kept)]
        self._buffers: list[PartyRows] = []
        self._leaders = [p.leader for p in parties]
        self.upload_names = [p.name for p in parties]    # what the server's messages call each row
        self.participants = list(range(len(parties)))
        self._next = 0
        self._latest: PartyRows | None = None
        self._work: list = []
        self._sizes = (up_numel + len(columns), down_numel)
        self._intra_receivers = intra_receivers

    def carriers(self, r: int) -> list[tuple[int, list[int]]]:
        """(rank, the participants it carries): each party's leader carries its party's upload."""
        return [(leader, [i]) for i, leader in enumerate(self._leaders)]

    def participant_name(self, i: int) -> str:
        return f"party {self.upload_names[i]}"

    def post(self, r: int) -> None:
        if not self._buffers:
            self._buffers = self._new_buffers()
        into = self._buffers[self._next]
        self._pending = into
        if self._point_to_point:
            self._work = [ReceivesInBackground([dist.irecv(row, src=leader, group=self.leaders)
                                                for row, leader in zip(into.received.unbind(0), self._leaders)])]
        else:
            self._work = [dist.gather(into.buffer[0], list(into.buffer.unbind(0)), dst=SERVER, group=self.leaders,
                                      async_op=True)]

    def is_complete(self) -> bool:
        return all(work.is_completed() for work in self._work)

    def wait(self) -> None:
        with comm.naming_failures(f"gather of the uploads over {comm.group_label('leaders', self.leaders)}"):
            for work in self._work:
                work.wait()
        self._latest, self._work = self._pending, []
        self._next = (self._next + 1) % len(self._buffers)

    def weights(self, w: torch.Tensor | None) -> torch.Tensor | None:
        """The round's w: the parties' `weight` upload column, normalised (in float64 on the host), where their
        training writes one; else `w`."""
        if "weight" not in self._columns:
            return w
        sent = self._latest.columns[:, self._columns.index("weight")].cpu().numpy().astype(np.float64)
        return torch.as_tensor(sent / sent.sum())

    @property
    def rows(self) -> torch.Tensor:
        """[P, D_up]: the uploads of the last completed round, party by party (without their upload columns)."""
        return self._latest.rows

    def weighted_mean(self, w, out: torch.Tensor) -> torch.Tensor:
        return self._latest.weighted_sum(w, out)

    def send(self, down: torch.Tensor) -> None:
        broadcast_global(down, self.leaders)

    def round_stats(self, r: int) -> RoundStats:
        """Every trainer rank's numbers, per party: the ranks' mean loss, the images they trained, the slowest
        rank's seconds, the records they skipped."""
        stats = comm.gather(None, what=round_statistics(r), timeout_s=self.control.timeout_s,
                            comm=self.control.mpi, root=SERVER)
        P = len(self._leaders)
        loss, images, seconds, count = np.zeros(P), np.zeros(P), np.zeros(P), np.zeros(P)
        bad = np.zeros(P, dtype=np.int64)
        first_step = np.zeros(P)
        columns: dict[str, np.ndarray] = {}
        for s in (s for s in stats if s is not None):
            i = s["party"]
            for name, value in s.get("columns", {}).items():   # the leader's numbers of its party's round
                columns.setdefault(name, np.full(P, np.nan))[i] = value
            bad[i] += s["bad_records"]
            first_step[i] = max(first_step[i], s.get("first_step_s") or 0.0)
            loss[i] += s["loss"]
            images[i] += s["images"]
            seconds[i] = max(seconds[i], s["seconds"])
            count[i] += 1
        return RoundStats(loss / np.maximum(count, 1), images, seconds, bad,
                          first_step if first_step.any() else None, columns)

    def state_dict(self) -> dict:
        """Nothing to keep: the buffers are refilled every round."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def bytes_per_round(self) -> dict[str, int]:
        """Up: P uploads to the server; down: the global payload to P leaders (both cross silo boundaries);
        intra: each leader's broadcast to the other ranks of its party (stays inside the party), or, where the
        party's ranks share one copy per node, to the keepers of its other nodes."""
        item = torch.empty((), dtype=self.dtype).element_size()
        up, down = (n * item for n in self._sizes)
        P = len(self._leaders)
        return {"up": up * P, "down": down * P, "intra": down * self._intra_receivers}


def intra_receivers(parties: list[Party], shared: list[Party]) -> int:
    """The ranks a global payload reaches inside the parties: each party's other ranks, or, for a party whose
    ranks share one copy per node (`shared`), the keepers of its other nodes."""
    return sum(len(keepers(p.ranks) if p in shared else p.ranks) - 1 for p in parties)


# ---------------------------------------------------------------- the trainer's side


def uploads_point_to_point(device) -> bool:
    """On CPU (gloo) each upload is received straight into its row: gloo's gather stages all rows, the server's
    own included, in a temporary [P+1, D_up] of its own every round. On GPUs a gather (NCCL's receives into the
    rows; gloo, where ranks share a GPU, has no send/receive of CUDA tensors)."""
    return torch.device(device).type == "cpu"


class LeaderUpload:
    """A party leader's plain upload (core/seams.py, Uploads): [θ_i | up payloads | columns] as it is."""
    def __init__(self, leaders):
        self.leaders = leaders

    def begin(self, r: int, participants: list[int], down: torch.Tensor) -> None:
        pass

    def each(self, upload: torch.Tensor) -> None:
        send_local(upload, self.leaders)

    def end(self, total=None) -> None:
        pass


def leader_upload(cfg, layout: Layout, leaders, control: Control, up_numel: int, backbone: int):
    """The leader's upload over the `leaders` group, masked under fed.secure_aggregation (its session on the
    `control` channel); each party weighs its batch per step over the largest (fed.weighting=batch: public, from
    the config) or 1."""
    plain = LeaderUpload(leaders)
    sizes = (None if cfg.fed.weighting == "uniform"
             else np.array(list(party_batches(cfg, layout).values()), dtype=np.float64))
    return secure_or_plain(cfg, plain, control, lambda i: f"party {layout.parties[i].name}", sizes, backbone,
                           up_numel)


def send_local(upload: torch.Tensor, leaders) -> None:
    with comm.naming_failures(f"gather of the uploads over {comm.group_label('leaders', leaders)}"):
        if uploads_point_to_point(upload.device):
            dist.send(upload, dst=SERVER, group=leaders)
        else:
            dist.gather(upload, None, dst=SERVER, group=leaders)


def broadcast_global(down: torch.Tensor, leaders) -> None:
    with comm.naming_failures(f"broadcast of Theta over {comm.group_label('leaders', leaders)}"):
        dist.broadcast(down, src=SERVER, group=leaders)


def receive_global(down: torch.Tensor, party: Party, rank: int, groups: Groups, node=None) -> None:
    """The leader takes the payload from the server and passes it on over the party's group, or, where the party's
    ranks on a node share one copy (`node`, comm/node_share.py), over the group of its nodes' keepers (None: the
    party lives on one node)."""
    if rank == party.leader:
        broadcast_global(down, groups.leaders)
    group = node.keepers if node is not None else groups.party
    if group is not None:
        with comm.naming_failures(f"broadcast of Theta over {comm.group_label(party.name, group)}"):
            dist.broadcast(down, src=party.leader, group=group)


def report(control: Control, r: int, stats: dict) -> None:
    comm.gather(stats, what=round_statistics(r), timeout_s=control.timeout_s, comm=control.mpi, root=SERVER)
