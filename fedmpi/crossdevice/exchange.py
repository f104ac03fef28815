"""A cross-device round's communication, as the exchange of the server's round loop (docs/ARCHITECTURE.md,
"The round loop and its exchange"). Control (the round's client assignment, per-rank statistics) goes over
MPI; tensors over torch.distributed in one group of the server and every trainer rank:
  down: the server broadcasts Theta (one flat buffer);
  up:   the trainer ranks' payloads [sum_k n_k theta_k | sum_k n_k] (float64) are summed onto the server by one
        reduce, so the bytes of a round grow with the number of trainer ranks, never with the clients a rank
        trains.
The server side samples the round's clients (the exchange is where a round's uploads come from)."""
from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from fedmpi import comm
from fedmpi.crossdevice.sampler import ClientSampler, assign_to_ranks
from fedmpi.roles.exchange import round_statistics
from fedmpi.topology import SERVER


def _assignment(r: int) -> str:
    return f"round {r + 1} client assignment (bcast over server + trainers)"


def client_group(ctx):
    """The torch.distributed group of server + trainer ranks; every rank of a cross-device run (there are no
    validators) creates it, in the same order."""
    return comm.new_group([SERVER, *ctx.layout.trainer_ranks])


class ClientExchange:
    """Server side, the exchange of the round loop (fedmpi.roles.server). `rows` is None (no per-party uploads:
    FV cannot run on it). With a `log`, each round's sampled clients go to its /clients table."""
    rows = None

    def __init__(self, ctx, sampler: ClientSampler, sizes: np.ndarray, numel: int, log=None):
        self.ctx, self.sampler, self.sizes, self.numel, self.log = ctx, sampler, sizes, numel, log
        self.trainers = ctx.layout.trainer_ranks
        self.group = client_group(ctx)
        self.payload = torch.zeros(numel + 1, dtype=torch.float64, device=ctx.device)
        self.clients = np.zeros(0, dtype=np.int64)
        self._work = None
        self._theta_bytes = 0

    @property
    def participation(self) -> float:
        return len(self.clients) / self.sampler.population

    def send(self, theta: torch.Tensor) -> None:
        self._theta_bytes = theta.numel() * theta.element_size()
        dist.broadcast(theta, src=SERVER, group=self.group)

    def post(self, r: int) -> None:
        """Sample round r's clients, tell each trainer rank its share, start the reduction of their models."""
        self.clients = self.sampler.sample()
        comm.bcast((r, assign_to_ranks(self.clients, self.sizes, len(self.trainers))), what=_assignment(r),
                   timeout_s=self.ctx.cfg.run.collective_timeout_s, comm=self.ctx.mpi_fed)
        self.payload.zero_()
        self._work = dist.reduce(self.payload, dst=SERVER, op=dist.ReduceOp.SUM, group=self.group, async_op=True)

    def is_complete(self) -> bool:
        return self._work is None or self._work.is_completed()

    def wait(self) -> None:
        if self._work is not None:
            self._work.wait()
            self._work = None

    def weighted_mean(self, w, out: torch.Tensor) -> torch.Tensor:
        """sum_k n_k theta_k / sum_k n_k over the round's clients (w is not used: the weights are the clients'
        example counts, applied on the trainer ranks before the reduction)."""
        out.copy_(self.payload[:-1] / self.payload[-1])
        return out

    def round_stats(self, r: int) -> list[dict]:
        """One statistics row for the clients' group: the clients' n-weighted mean loss, the images trained,
        the slowest rank's seconds."""
        stats = comm.gather(None, what=round_statistics(r), timeout_s=self.ctx.cfg.run.collective_timeout_s,
                            comm=self.ctx.mpi_fed)
        stats = [s for s in stats if s is not None]
        if self.log is not None:
            self.log.append("clients", round=r, ids=self.clients)
        weight = sum(s["weight"] for s in stats)
        return [{"party": 0, "loss": sum(s["loss_sum"] for s in stats) / max(weight, 1),
                 "images": sum(s["images"] for s in stats), "seconds": max(s["seconds"] for s in stats)}]

    def bytes_per_round(self) -> dict:
        """Theta down to every trainer rank, every trainer rank's payload up (as the reduce's inputs)."""
        R = len(self.trainers)
        return {"up": R * self.payload.numel() * self.payload.element_size(), "down": R * self._theta_bytes,
                "intra": 0}

    def state_dict(self) -> dict:
        return {"sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state["sampler"])


class TrainerSide:
    """A trainer rank's end of the exchange."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.trainers = ctx.layout.trainer_ranks
        self.group = client_group(ctx)

    def receive_global(self, theta: torch.Tensor) -> None:
        dist.broadcast(theta, src=SERVER, group=self.group)

    def receive_assignment(self, r: int) -> list[int]:
        """This rank's clients of round r."""
        sent_r, assignment = comm.bcast(None, what=_assignment(r), timeout_s=self.ctx.cfg.run.collective_timeout_s,
                                        comm=self.ctx.mpi_fed)
        if sent_r != r:
            raise RuntimeError(f"client assignment for round {sent_r + 1} arrived in round {r + 1}")
        return assignment[self.trainers.index(self.ctx.rank)]

    def send_local(self, payload: torch.Tensor) -> None:
        dist.reduce(payload, dst=SERVER, op=dist.ReduceOp.SUM, group=self.group)

    def send_stats(self, r: int, stats: dict) -> None:
        comm.gather(stats, what=round_statistics(r), timeout_s=self.ctx.cfg.run.collective_timeout_s,
                    comm=self.ctx.mpi_fed)
