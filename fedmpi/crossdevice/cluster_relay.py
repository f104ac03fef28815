"""PrivacyFace on personal albums, the server's side (the class exchange of the round loop, core/seams.py): each
round it receives every sampled client's DPLC release [Q, d + 2] (crossdevice/album_clusters.py sends them after
the round's reduction, in the assignment's order), checks the released clusters as a class payload
(aggregation/class_payload_check.py: not finite or out of range among the round's, named and left out of the
relay), puts the rest into the pool (crossdevice/cluster_pool.py) and, after Θ went out, broadcasts the pool to
every trainer rank: the next cohort's negatives. The server reads no class embedding for the method; the log's
`mean_cosine` is the simulation's measurement of the rows its store keeps between a client's rounds
(crossdevice/client_state.py), which a real device would keep itself (docs/BASELINES.md)."""
from __future__ import annotations

import torch

from fedmpi.aggregation.class_payload_check import out_of_range
from fedmpi.comm import p2p
from fedmpi.comm.message_end import mark_end, reached_end
from fedmpi.comm.receives import ReceivesInBackground
from fedmpi.crossdevice.album_clusters import TAG_CLUSTERS
from fedmpi.crossdevice.client_state import excluded_clients
from fedmpi.crossdevice.cluster_pool import ClusterPool
from fedmpi.crossdevice.sampler import assign_to_ranks


class ClusterRelay:
    """`part`: the summary part (PrivacyFace's PrivateClusters); `kit`: the DeviceKit (the clients' store, d, the
    round's ClientExchange). The pool lives in the store, so that it is checkpointed with the clients' states."""

    def __init__(self, part, kit, diagnostics):
        self.part, self.store, self.exchange, self.d = part, kit.store, kit.exchange, kit.d
        self.diagnostics = diagnostics          # DeviceRows without a part: the stored rows' spread, for the log
        ex, o = kit.exchange, part.options
        self.pool = ClusterPool(o.pool_rounds, ex.sampler.count, o.clusters, kit.d, ex.sampler.population, ex.device,
                                self.store.initial.dtype)
        self.store.pool = self.pool
        self.order: list[int] = []
        self.received = torch.zeros(0)
        self._work: list = []
        self.row: dict | None = None
        self._background = torch.device(ex.device).type == "cpu"

    def post(self, r: int) -> None:
        """Receive the releases of round r's clients (the exchange sampled them), rank by rank in its order."""
        ex = self.exchange
        assignment = assign_to_ranks(ex.clients, ex.sizes, len(ex.trainers))
        self.order = [k for ks in assignment for k in ks]
        self.received = torch.zeros(len(self.order), self.pool.Q, self.d + 2, dtype=self.pool.clusters.dtype,
                                    device=ex.device)
        works, i = [], 0
        for rank, ks in zip(ex.trainers, assignment):
            for _ in ks:
                mark_end(self.received[i])       # a release shorter than [Q, d + 2] leaves the mark (left_out)
                works.append(p2p.irecv(self.received[i], src=rank, group=ex.group, tag=TAG_CLUSTERS))
                i += 1
        self._work = [ReceivesInBackground(works)] if self._background and works else works

    def is_complete(self) -> bool:
        return all(work.is_completed() for work in self._work)

    def wait(self) -> None:
        for work in self._work:
            work.wait()
        self._work = []

    def left_out(self, r: int, excluded) -> int:
        """Zero the releases that did not fill their [Q, d + 2] (comm/message_end.py), the released clusters that are
        not finite or out of range among the round's (one line each), and those of a client whose upload the
        server's check left out; returns how many clusters were left out."""
        short = 0
        for k, release in zip(self.order, self.received):
            if not reached_end(release):
                print(f"round {r + 1}: the release of client {k} is wrongly shaped (shorter than its "
                      f"{' x '.join(map(str, release.shape))} values): left out of the relay", flush=True)
                release.zero_()
                short += self.pool.Q
        rows = self.received.view(-1, self.d + 2)
        owners = [k for k in self.order for _ in range(self.pool.Q)]
        looked = [i for i in range(rows.shape[0]) if bool(rows[i, -1] != 0) or not bool(torch.isfinite(rows[i]).all())]
        why = dict(zip(looked, out_of_range([rows[i] for i in looked], self.store.norm_ratio)))
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
        state["releases"].fill_(int(self.pool.releases.max()))
        self.pool.broadcast(self.exchange.group)
        self.diagnostics.step(r, lr, state, excluded)
        item = self.pool.clusters.element_size()
        width = self.pool.Q * (self.d + 2)
        self.row = {**self.diagnostics.row, **self.part.privacy_row(int(state["releases"])), "released": released,
                    "pool": self.pool.valid(), "left_out": left_out,
                    "device_bytes_up": self.exchange.global_bytes + width * item,
                    "device_bytes_down": self.exchange.global_bytes + self.pool.valid() * (self.d + 2) * item}

    def bytes_per_round(self) -> dict[str, int]:
        """The releases up; the pool (and its owners) down to every trainer rank."""
        pool = self.pool.clusters.numel() * self.pool.clusters.element_size() + self.pool.owners.numel() * 8
        return {"up": self.received.numel() * self.received.element_size(),
                "down": len(self.exchange.trainers) * pool, "intra": 0}


def what_leaves(cfg, part) -> str:
    """What leaves each client in a PrivacyFace run on albums, the words of its start-up line (core/what_leaves.py;
    docs/BASELINES.md, "What crosses the network")."""
    from fedmpi.algorithms.dplc import gaussian_sigma

    c, o, d = cfg.clients, part.options, cfg.model.embedding_size
    epsilon, delta = o.budget.epsilon, o.budget.release_delta
    most, most_delta = o.budget.spent(c.rounds)
    sigma = gaussian_sigma(o.kappa, o.epsilon_sum, o.delta)
    return (f"backbone and its DP clusters ({o.clusters} x {d + 2} values a round it is "
            f"sampled, each release ({epsilon:.3g}, {delta:.3g})-DP, noise std {sigma:.3g} a coordinate of its sum; a "
            f"client sampled every round spends ({most:.3g}, {most_delta:.3g})); in this simulation its class "
            f"embeddings ({c.identities_per_client} x {d} values) also travel to the server's store between its "
            f"rounds, which a real device keeps: the method reads none of them")
