"""A cross-device round's communication. Control (the round's client assignment, per-rank statistics) goes
over MPI; tensors over torch.distributed in one group of the server and every trainer rank:
  down: the server broadcasts Theta (one flat buffer);
  up:   the trainer ranks' payloads [sum_k n_k theta_k | sum_k n_k] are summed onto the server by one reduce,
        so the bytes of a round grow with the number of trainer ranks, never with the clients a rank trains."""
from __future__ import annotations

import torch
import torch.distributed as dist

from fedmpi import comm
from fedmpi.topology import SERVER


class ClientExchange:
    def __init__(self, ctx):
        self.ctx = ctx
        self.trainers = ctx.layout.trainer_ranks
        # every rank of a cross-device run (server and trainers; there are no validators) creates it
        self.group = comm.new_group([SERVER, *self.trainers])

    def broadcast(self, theta: torch.Tensor) -> None:
        dist.broadcast(theta, src=SERVER, group=self.group)

    def reduce(self, payload: torch.Tensor) -> torch.Tensor:
        """Sum of every rank's payload, on the server (the server adds zeros)."""
        dist.reduce(payload, dst=SERVER, op=dist.ReduceOp.SUM, group=self.group)
        return payload

    def send_assignment(self, r: int, assignment: list[list[int]]) -> None:
        self.ctx.mpi_fed.bcast((r, assignment), root=SERVER)

    def receive_assignment(self, r: int) -> list[int]:
        """This trainer rank's clients of round r."""
        sent_r, assignment = self.ctx.mpi_fed.bcast(None, root=SERVER)
        if sent_r != r:
            raise RuntimeError(f"client assignment for round {sent_r + 1} arrived in round {r + 1}")
        return assignment[self.trainers.index(self.ctx.rank)]

    def bytes_per_round(self, payload_bytes: int, theta_bytes: int) -> int:
        """Theta down to every trainer rank and every trainer rank's payload up (as the reduce's inputs)."""
        return len(self.trainers) * (payload_bytes + theta_bytes)
