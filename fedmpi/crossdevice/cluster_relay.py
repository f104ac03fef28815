"""A summary part across devices (algorithms/class_parts.py, SummaryPart; on personal albums), the server's side
(the class exchange of the round loop, core/seams.py): each round it receives every sampled client's summary
[Q, width] (crossdevice/album_clusters.py sends them after the round's reduction, in the assignment's order),
checks its valid rows (cones) as a class payload (aggregation/class_payload_check.py: wrongly shaped, not finite
or out of range among the round's, named and left out of the relay), puts the rest into the pool
(crossdevice/cluster_pool.py) and, after Θ went out, broadcasts the pool to every trainer rank: the next cohort's
negatives. The server reads no class embedding for the part; the log's `mean_cosine` is the simulation's
measurement of the rows its store keeps between a client's rounds (crossdevice/client_state.py), which a real
device would keep itself (docs/BASELINES.md)."""
from __future__ import annotations

import torch

from fedmpi.aggregation.class_payload_check import left_out as judged, wrongly_shaped
from fedmpi.comm.marked_receives import MarkedReceives
from fedmpi.comm.tags import CLUSTERS as TAG_CLUSTERS
from fedmpi.crossdevice.client_state import excluded_clients
from fedmpi.crossdevice.cluster_pool import ClusterPool
from fedmpi.crossdevice.sampler import assign_to_ranks


class ClusterRelay:
    """`part`: the summary part; `kit`: the DeviceKit (the clients' store, d, the round's ClientExchange). The pool
    lives in the store, so that it is checkpointed with the clients' states."""

    def __init__(self, part, kit):
        self.part, self.store, self.exchange, self.d = part, kit.store, kit.exchange, kit.d
        self.diagnostics = kit.nothing()        # DeviceRows without a part: the stored rows' spread, for the log
        ex = kit.exchange
        self.shape = part.summary_shape(kit.d)          # [Q, width]
        self.pool = ClusterPool(part.kept_rounds, ex.sampler.count, self.shape, ex.sampler.population, ex.device,
                                self.store.initial.dtype)
        self.store.pool = self.pool
        self.order: list[int] = []
        self.received = torch.zeros(0)
        self.receives = MarkedReceives(ex.device)
        self.row: dict | None = None

    def post(self, r: int) -> None:
        """Receive the releases of round r's clients (the exchange sampled them), rank by rank in its order."""
        ex = self.exchange
        assignment = assign_to_ranks(ex.clients, ex.sizes, len(ex.trainers))
        self.order = [k for ks in assignment for k in ks]
        self.received = torch.zeros(len(self.order), *self.shape, dtype=self.pool.clusters.dtype, device=ex.device)
        # a release shorter than [Q, width] leaves its buffer's end marked (left_out)
        sources = [rank for rank, ks in zip(ex.trainers, assignment) for _ in ks]
        self.receives.post(self.received.unbind(0), sources, ex.group, TAG_CLUSTERS)

    def is_complete(self) -> bool:
        return self.receives.is_complete()

    def wait(self) -> None:
        self.receives.wait()

    def left_out(self, r: int, excluded) -> int:
        """Zero the releases that did not fill their [Q, width] (comm/message_end.py), the released rows that are
        not finite or out of range among the round's (one line each), and those of a client whose upload the
        server's check left out; returns how many clusters were left out."""
        short = 0
        for k, release in zip(self.order, self.received):
            reason = wrongly_shaped(release)
            if reason:
                print(f"round {r + 1}: the release of client {k} is {reason}: left out of the relay", flush=True)
                release.zero_()
                short += self.pool.Q
        rows = self.received.view(-1, self.shape[1])
        owners = [k for k in self.order for _ in range(self.pool.Q)]
        looked = [i for i in range(rows.shape[0]) if bool(rows[i, -1] != 0) or not bool(torch.isfinite(rows[i]).all())]
        why = dict(zip(looked, judged([rows[i] for i in looked], self.store.norm_ratio)))
        dropped = excluded_clients(self.exchange.clients, excluded)
        count = short
        for i in looked:
            if why[i]:
                print(f"round {r + 1}: a cluster released by client {owners[i]} is {why[i]}: left out of the relay",
                      flush=True)
            if why[i] or owners[i] in dropped:
                rows[i].zero_()
                count += 1
        return count

    def step(self, r: int, lr: float, state: dict, excluded=None) -> None:
        """The round's releases into the pool, then the pool to every trainer rank (after Θ: the next cohort's)."""
        left_out = self.left_out(r, excluded)
        released = int((self.received[:, :, -1] > 0).sum())
        self.pool.put(r, self.order, self.received)
        columns = self.part.relayed(int(self.pool.releases.max()), state)
        self.pool.broadcast(self.exchange.group)
        self.diagnostics.step(r, lr, state, excluded)
        item = self.pool.clusters.element_size()
        q, width = self.shape
        self.row = {**self.diagnostics.row, **columns, "released": released,
                    "pool": self.pool.valid(), "left_out": left_out,
                    "device_bytes_up": self.exchange.global_bytes + q * width * item,
                    "device_bytes_down": self.exchange.global_bytes + self.pool.valid() * width * item}

    def recorded(self) -> dict:
        """The round's releases as received (Q rows [p | α | released] a client), for core/received.py; the rows
        the simulation's store keeps are not the server's to see and are left out."""
        return {"clusters": self.received.reshape(-1, self.shape[1]),
                "cluster_sender": torch.as_tensor(self.order, dtype=torch.int64).repeat_interleave(self.shape[0])}

    def bytes_per_round(self) -> dict[str, int]:
        """The releases up; the pool (and its owners) down to every trainer rank."""
        pool = self.pool.clusters.numel() * self.pool.clusters.element_size() + self.pool.owners.numel() * 8
        return {"up": self.received.numel() * self.received.element_size(),
                "down": len(self.exchange.trainers) * pool, "intra": 0}
