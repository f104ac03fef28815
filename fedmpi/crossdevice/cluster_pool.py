"""The pool of a summary part across devices (algorithms/class_parts.py, SummaryPart): the summaries the clients of
the last `rounds` rounds sent (DP clusters, spec §3.3, say), which the server relays to the next cohort as
negatives (spec §3.4). Fixed size, so that one broadcast moves it (every rank the same shapes): `rounds` slots of
cohort x Q rows [p (d) | α | valid] (a summary's [Q, width]; models/cone_negatives.py: a row whose last value is 0
holds no cone) and the id of the client that sent each row (-1: none), so that a client leaves its own out. The
server also counts each client's summaries (one each round it is sampled, released or not: what a DP summary
spends). The server's pool is checkpointed with the clients' store, a trainer
rank's received copy with its trainer part."""
from __future__ import annotations

import torch
import torch.distributed as dist

from fedmpi.layout import SERVER
from fedmpi.models.cone_negatives import valid_cones


class ClusterPool:
    def __init__(self, rounds: int, cohort: int, shape: tuple[int, int], population: int, device, dtype):
        """shape: one client's summary [Q, width] (SummaryPart.summary_shape)."""
        (self.Q, width), self.rounds = shape, rounds
        self.per_round = cohort * self.Q
        self.clusters = torch.zeros(rounds * self.per_round, width, dtype=dtype, device=device)
        self.owners = torch.full((rounds * self.per_round,), -1, dtype=torch.int64, device=device)
        self.releases = torch.zeros(population, dtype=torch.int64)      # the server's count per client (CPU)

    def put(self, r: int, clients: list[int], released: torch.Tensor) -> None:
        """Round r's releases [m, Q, width] of `clients` (in that order) into the round's slot, replacing the
        releases of round r − rounds; each client's release counted."""
        start = (r % self.rounds) * self.per_round
        rows = released.reshape(-1, self.clusters.shape[1])
        self.clusters[start:start + self.per_round].zero_()
        self.owners[start:start + self.per_round] = -1
        self.clusters[start:start + rows.shape[0]] = rows.to(self.clusters)
        self.owners[start:start + rows.shape[0]] = torch.tensor(clients, dtype=torch.int64).repeat_interleave(
            self.Q).to(self.owners.device)
        self.releases[torch.tensor(clients, dtype=torch.int64)] += 1

    def negatives_for(self, k: int) -> torch.Tensor | None:
        """The valid clusters of every client but k (spec §3.6: a client does not use its own), or None."""
        return valid_cones(self.clusters[self.owners != k])

    def broadcast(self, group) -> None:
        """The server's pool to every trainer rank's copy (both sides call it: the same two broadcasts in order)."""
        dist.broadcast(self.clusters, src=SERVER, group=group)
        dist.broadcast(self.owners, src=SERVER, group=group)

    def valid(self) -> int:
        return int((self.clusters[:, -1] > 0).sum())

    def state_dict(self) -> dict:
        return {"clusters": self.clusters, "owners": self.owners, "releases": self.releases}

    def load_state_dict(self, state: dict) -> None:
        for key, target in self.state_dict().items():
            saved = state[key]
            if saved.shape != target.shape:
                raise ValueError(f"checkpoint: the relayed clusters' {key} is {list(saved.shape)}, this run keeps "
                                 f"{list(target.shape)} (the class part's options and "
                                 f"clients.fraction as the checkpoint's run)")
            target.copy_(saved)
