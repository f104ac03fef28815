"""A cross-device round's communication, as the exchange of the server's round loop (docs/ARCHITECTURE.md,
"The round loop and its seams"). Control (the round's client assignment, per-rank statistics) goes over
MPI; tensors over torch.distributed in one group of the server and every trainer rank:
  down:  the server broadcasts the global payload [Theta | the rule's down payloads] (one flat buffer);
  up:    the trainer ranks' payloads [sum_k n_k theta_k | sum_k n_k u_k for each up payload | sum_k n_k]
         (float64) are summed onto the server by one reduce, so these bytes grow with the number of trainer
         ranks, never with the clients a rank trains; for an aggregator that reads every upload (a robust
         rule) each client's upload [theta_k | up payloads] is sent instead, point-to-point into its row of
         a [clients of the round, D_up] buffer on the server;
  state: for a rule with per-client state (Algorithm.client_state), the server sends each sampled client's
         state to the rank that trains it and receives the updated state back (point-to-point, in the order of
         the assignment): 2 x (sampled clients) x (state size) per round.
The server side samples the round's clients (the exchange is where a round's uploads come from)."""
from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from fedmpi import comm
from fedmpi.comm import p2p
from fedmpi.comm.message_end import mark_end
from fedmpi.comm.receives import ReceivesInBackground
from fedmpi.comm.tags import CLIENT_UPLOAD as UPLOAD_TAG
from fedmpi.crossdevice.client_state import ClientStore
from fedmpi.crossdevice.sampler import ClientSampler, assign_to_ranks
from fedmpi.core.context import Control
from fedmpi.core.seams import RoundStats, round_statistics
from fedmpi.layout import SERVER


def _assignment(r: int) -> str:
    return f"round {r + 1} client assignment (bcast over server + trainers)"


def client_group(trainers: list[int]):
    """The torch.distributed group of server + trainer ranks; every rank of a cross-device run (there are no
    validators) creates it, in the same order."""
    return comm.new_group([SERVER, *trainers])


class ClientExchange:
    """Server side, the exchange of the round loop (fedmpi.core.server), over `group` (client_group) with the
    `trainers` ranks and their `control` channel. `up_numel`: the size of [theta | up payloads]; `store`: the
    clients' states (None for a rule whose clients are stateless). With a `log`, each round's sampled clients go
    to its /clients table. `every_upload`: keep each sampled client's upload in `rows` (in the order of
    `clients`) for an aggregator that reads them all; otherwise `rows` is None and the uploads are summed on the
    way (FV cannot run on it either way: it scores parties, not clients)."""

    def __init__(self, trainers: list[int], group, control: Control, sampler: ClientSampler, sizes: np.ndarray,
                 up_numel: int, device, dtype, log=None, store: ClientStore | None = None,
                 every_upload: bool = False):
        self.trainers, self.group, self.control = trainers, group, control
        self.sampler, self.sizes, self.log, self.store, self.device = sampler, sizes, log, store, device
        self.gives_uploads = every_upload
        self.payload = torch.zeros(0 if every_upload else up_numel + 1, dtype=torch.float64, device=device)
        self._rows = torch.zeros(sampler.count if every_upload else 0, up_numel, dtype=dtype, device=device)
        self.clients = np.zeros(0, dtype=np.int64)
        self._work: list = []
        self._returning: list[tuple[int, torch.Tensor, object]] = []
        self._down_bytes = 0
        self.first_loss_line = None     # (r, loss) -> a line on the launch's first round's loss, or '' (the faces')

    @property
    def rows(self) -> torch.Tensor | None:
        """[clients of the round, D_up]: each sampled client's upload (only with every_upload)."""
        return self._rows if self.gives_uploads else None

    @property
    def upload_names(self) -> list[str]:
        """What the server's messages call each upload of the round: the sampled clients, in the order of `rows`."""
        return [self.participant_name(k) for k in self.clients]

    def example_weights(self) -> torch.Tensor:
        """n_k / sum n_k over the round's clients, in the order of `rows`: the weighting of the mean (FedAvg)."""
        n = torch.as_tensor(self.sizes[self.clients], dtype=torch.float64)
        return n / n.sum()

    @property
    def participation(self) -> float:
        return len(self.clients) / self.sampler.population

    @property
    def global_bytes(self) -> int:
        """The global payload's bytes, as the last `send` sent it to each trainer rank."""
        return self._down_bytes

    def send(self, down: torch.Tensor) -> None:
        self._down_bytes = down.numel() * down.element_size()
        dist.broadcast(down, src=SERVER, group=self.group)

    @property
    def participants(self) -> list[int]:
        """The round's sampled clients, in the order of `rows` and of the log."""
        return self.clients

    def participant_name(self, k: int) -> str:
        return f"client {k}"

    def carriers(self, r: int) -> list[tuple[int, list[int]]]:
        """Sample round r's clients and tell each trainer rank its share: (rank, the clients it trains)."""
        self.clients = self.sampler.sample()
        assignment = assign_to_ranks(self.clients, self.sizes, len(self.trainers))
        comm.bcast((r, assignment), what=_assignment(r), timeout_s=self.control.timeout_s, comm=self.control.mpi)
        return list(zip(self.trainers, assignment))

    def post(self, r: int) -> None:
        """Round r's clients and their trainer ranks (carriers; and send their states), start receiving the
        states back and the reduction of the clients' payloads."""
        assignment = [ks for _, ks in self.carriers(r)]
        # NCCL matches a pair's point-to-point operations in issue order (gloo by tag): the receives are posted
        # in the order each trainer rank sends, its clients' uploads while it trains them, then their states
        outgoing = self._send_states(assignment) if self.store is not None else []
        if self.gives_uploads:
            row = {int(k): i for i, k in enumerate(self.clients)}
            self._work = [ReceivesInBackground([p2p.irecv(self._rows[row[k]], src=rank, group=self.group,
                                                          tag=UPLOAD_TAG)
                                                for rank, ks in zip(self.trainers, assignment) for k in ks])]
            self._returning = self._receive_states(outgoing)
            return
        self._returning = self._receive_states(outgoing)
        self.payload.zero_()
        self._work = [dist.reduce(self.payload, dst=SERVER, op=dist.ReduceOp.SUM, group=self.group, async_op=True)]

    def _receive_states(self, outgoing: list[tuple[int, int, torch.Tensor]]) -> list:
        for _, _, state in outgoing:      # a state shorter than the layout's leaves the mark (ClientStore.put_round)
            mark_end(state)
        return [(k, state, p2p.irecv(state, src=rank, group=self.group)) for rank, k, state in outgoing]

    def _send_states(self, assignment: list[list[int]]) -> list[tuple[int, int, torch.Tensor]]:
        """Each sampled client's state to the rank that trains it; (rank, client, buffer) for the state's return."""
        outgoing = [(rank, k, self.store.get(k).to(self.device, copy=True))
                    for rank, ks in zip(self.trainers, assignment) for k in ks]
        for work in [p2p.isend(state, dst=rank, group=self.group) for rank, _, state in outgoing]:
            work.wait()
        return outgoing

    def is_complete(self) -> bool:
        return (all(work.is_completed() for work in self._work)
                and all(work.is_completed() for _, _, work in self._returning))

    def wait(self) -> None:
        for _, _, work in self._returning:
            work.wait()
        if self._returning:
            self.store.put_round(self.sampler.rounds_drawn - 1, [(k, state) for k, state, _ in self._returning])
        self._returning = []
        for work in self._work:
            work.wait()
        self._work = []

    def weights(self, w):
        """The round's w as the side work gives it (the clients' example counts are applied on the way)."""
        return w

    def weighted_mean(self, w, out: torch.Tensor) -> torch.Tensor:
        """sum_k n_k u_k / sum_k n_k over the round's clients, for theta and each up payload. The weights are the
        clients' example counts: applied on the trainer ranks before the reduction (w is None), or, with every
        upload kept, w = example_weights() over the rows."""
        if self.gives_uploads:
            return torch.mv(self._rows.t(), w.to(device=self._rows.device, dtype=self._rows.dtype), out=out)
        out.copy_(self.payload[:-1] / self.payload[-1])
        return out

    def round_stats(self, r: int) -> RoundStats:
        """The log's one row for the sampled clients: their n-weighted mean loss, the images trained, the slowest
        rank's seconds."""
        stats = comm.gather(None, what=round_statistics(r), timeout_s=self.control.timeout_s,
                            comm=self.control.mpi)
        stats = [s for s in stats if s is not None]
        if self.log is not None:
            self.log.append("clients", round=r, ids=self.clients)
        examples = sum(s["examples"] for s in stats)
        loss = sum(s["loss_sum"] for s in stats) / max(examples, 1)
        if self.first_loss_line is not None:
            line, self.first_loss_line = self.first_loss_line(r, loss), None
            if line:
                print(line, flush=True)
        return RoundStats(loss=np.array([loss]),
                          images=np.array([float(sum(s["images"] for s in stats))]),
                          seconds=np.array([max(s["seconds"] for s in stats)]),
                          bad_records=np.zeros(1, dtype=np.int64))

    def bytes_per_round(self) -> dict:
        """The global payload down to every trainer rank, every trainer rank's payload up (as the reduce's
        inputs) or every client's upload; each sampled client's state down and back up when the rule keeps one."""
        R = len(self.trainers)
        state = 0
        if self.store is not None:
            state = len(self.clients) * self.store.layout.numel * self.store.initial.element_size()
        up = self._rows.numel() * self._rows.element_size() if self.gives_uploads else R * self.payload.numel() * self.payload.element_size()
        return {"up": up + state, "down": R * self._down_bytes + state, "intra": 0}

    def state_dict(self) -> dict:
        state = {"sampler": self.sampler.state_dict()}
        if self.store is not None:
            state["clients"] = self.store.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state["sampler"])
        if self.store is not None:
            self.store.load_state_dict(state["clients"])


class TrainerSide:
    """A trainer rank's end of the exchange: this `rank` among the `trainers`, over `group` and `control`."""

    def __init__(self, rank: int, trainers: list[int], group, control: Control, device):
        self.rank, self.trainers, self.group, self.control, self.device = rank, trainers, group, control, device

    def receive_global(self, down: torch.Tensor) -> None:
        dist.broadcast(down, src=SERVER, group=self.group)

    def receive_assignment(self, r: int) -> list[int]:
        """This rank's clients of round r."""
        sent_r, assignment = comm.bcast(None, what=_assignment(r), timeout_s=self.control.timeout_s,
                                        comm=self.control.mpi)
        if sent_r != r:
            raise RuntimeError(f"client assignment for round {sent_r + 1} arrived in round {r + 1}")
        return assignment[self.trainers.index(self.rank)]

    def receive_states(self, count: int, like: torch.Tensor) -> list[torch.Tensor]:
        """The states of this rank's `count` clients of the round, in the assignment's order."""
        states = [torch.empty_like(like, device=self.device) for _ in range(count)]
        for state in states:
            p2p.recv(state, src=SERVER, group=self.group)
        return states

    def send_states(self, states: list[torch.Tensor]) -> None:
        for state in states:
            p2p.send(state, dst=SERVER, group=self.group)

    def send_local(self, payload: torch.Tensor) -> None:
        dist.reduce(payload, dst=SERVER, op=dist.ReduceOp.SUM, group=self.group)

    def send_upload(self, upload: torch.Tensor) -> None:
        """One client's upload [theta_k | up payloads], into its row on the server (every_upload)."""
        p2p.send(upload, dst=SERVER, group=self.group, tag=UPLOAD_TAG)

    def send_stats(self, r: int, stats: dict) -> None:
        comm.gather(stats, what=round_statistics(r), timeout_s=self.control.timeout_s, comm=self.control.mpi)
