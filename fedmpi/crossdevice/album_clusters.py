"""A trainer rank's side of a method's class part across devices: what its clients minimise and what they send
beyond their state. A part picks it from `ClientKit` (core/class_kit.py), so that the trainer does not ask which
kind it holds:

  nothing, rows  `NoClassPayload` the client's head is the setting's (client_heads.py); its rows, if any, travel
                                  with its state (crossdevice/exchange.py); nothing else leaves the rank
  summaries      `AlbumClusters`  a summary part (class_parts.SummaryPart; on personal albums, spec §3,
                                  docs/BASELINES.md): each client's loss is the consensus-aware margin softmax over
                                  its own n rows and the relayed summaries (cones) of the other clients (spec §3.4,
                                  `AlbumRows`); after its local steps the part summarises its rows on the device
                                  (`summarise`, device=True) and the rank sends each client's summary
                                  [summary_shape(d)] to the server after the round's reduction (tag TAG_CLUSTERS, in
                                  the assignment's order); after Θ it receives the server's pool
                                  (crossdevice/cluster_relay.py) by broadcast, kept until the next."""
from __future__ import annotations

import torch

from fedmpi.comm import p2p
from fedmpi.config.clients import clients_per_round
from fedmpi.core.class_kit import ClassKit, NoClassPayload
from fedmpi.crossdevice.client_heads import OwnClassRows
from fedmpi.crossdevice.cluster_pool import ClusterPool
from fedmpi.comm.tags import CLUSTERS as TAG_CLUSTERS
from fedmpi.layout import SERVER
from fedmpi.models.cone_negatives import consensus_aware_loss
from fedmpi.models.heads import make_margin


class AlbumRows(OwnClassRows):
    """OwnClassRows whose loss is spec §3.4's over the client's rows and `pool`'s cones of the other clients, and
    which has the part summarise the client's rows after its local steps (`released`, in the order trained)."""

    def __init__(self, model, data, embedding_size: int, batch_size: int, margin, part, pool: ClusterPool,
                 frozen_batch_norm: bool = True):
        super().__init__(model, data, embedding_size, nu=1.0, batch_size=batch_size,    # no ℓ_pos: ν unused
                         frozen_batch_norm=frozen_batch_norm)
        self.margin, self.part, self.pool = margin, part, pool
        self.round, self.client, self.cones = 0, -1, None
        self.released: list[torch.Tensor] = []

    def begin(self, k: int, rows: torch.Tensor) -> None:
        super().begin(k, rows)
        self.client, self.cones = k, self.pool.negatives_for(k)

    def loss(self, f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return consensus_aware_loss(f, self.w, y, self.margin, self.cones)

    def end(self, rows: torch.Tensor) -> None:
        super().end(rows)
        out = torch.zeros(*self.part.summary_shape(self.d), dtype=self.w.dtype, device=self.w.device)
        self.part.summarise(self.w.detach(), out, self.round, self.client, {}, device=True)
        self.released.append(out)


class AlbumClusters(NoClassPayload):
    """The clients' summaries to the server, the server's pool back (every trainer rank keeps the same copy)."""

    def __init__(self, part, kit: "ClientKit"):
        super().__init__(part, kit)
        cfg = kit.cfg
        c = cfg.clients
        self.pool = ClusterPool(part.kept_rounds, clients_per_round(c.population, c.fraction),
                                part.summary_shape(cfg.model.embedding_size), c.population, kit.device, kit.dtype)
        margin = make_margin(cfg.model.head, cfg.model.scale, cfg.model.margin)
        self.head = AlbumRows(kit.model, kit.data, cfg.model.embedding_size, cfg.optim.batch_size, margin, part,
                              self.pool, c.batch_norm == "frozen")
        self.trainer_side = kit.trainer_side

    def prepare(self, r: int) -> None:
        self.head.round, self.head.released = r, []

    def upload(self, r: int) -> None:
        for release in self.head.released:
            p2p.send(release, dst=SERVER, group=self.trainer_side.group, tag=TAG_CLUSTERS)

    def download(self, r: int) -> None:
        self.pool.broadcast(self.trainer_side.group)

    def state(self) -> dict:
        return {"classes": {"clusters": self.pool.clusters, "owners": self.pool.owners}}


class ClientKit(ClassKit):
    """What a class part picks a trainer rank's side from across devices (ClassPart.party_side): the clients' model
    and data (where their rows live: in the client's head, client_heads.py, between the states the rank receives
    and sends back) and the trainer side's group (how bytes move). Nothing and the rows let nothing leave beyond
    the clients' states (crossdevice/exchange.py carries the rows with them)."""

    def __init__(self, cfg, model, data, trainer_side, device, dtype):
        self.cfg, self.model, self.data, self.device, self.dtype = cfg, model, data, device, dtype
        self.trainer_side = trainer_side
        self.Nothing = self.Rows = NoClassPayload
        self.Summaries = AlbumClusters
