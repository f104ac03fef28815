"""The face clients' class embeddings on the server: the class exchange of the server's round loop (core/seams.py)
in the cross-device setting. The rows travel with the clients' states (crossdevice/exchange.py: w_c down to the
rank that trains c, back up after its round) into the store's table W [M, n·d] (crossdevice/client_state.py), so
nothing moves here; after each round the method's class part steps on the rows of every client seen so far (a
`RowsPart`: FedAwS's spreadout, FedGC's correction; W as the stacked rows of the silo, each identity one party,
IdentityBounds; the round's clients' rows are its anchors, `RowsPart.step_round`: FedAwS's rows=round moves only
those) or nothing (positive-only FedAvg), or (a `SummaryPart`, on albums) relays the clients'
summaries to the next cohort (crossdevice/cluster_relay.py), and the round's row of the log's `classes` table says
how far apart the rows are (the mean pairwise cosine: 1 is Yu et al.'s collapse; from Σ ŵ, which a round updates
with the rows it changed, so that neither the measure nor the round-form step reads all of W when only a cohort's
rows moved)."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from fedmpi.core.class_kit import ClassKit
from fedmpi.core.seams import NoClasses
from fedmpi.core.server_rows import gathered, rows_of, step_kept
from fedmpi.core.what_leaves import line
from fedmpi.crossdevice.client_state import excluded_clients
from fedmpi.crossdevice.cluster_relay import ClusterRelay
from fedmpi.models.positive_only import cosine_of_sum, unit_sum

COLUMNS = {"round": ((), "i8"), "mean_cosine": ((), "f8"), "clients_seen": ((), "i8")}


class DeviceKit(ClassKit):
    """What a class part picks its server side from (ClassPart.server_side), across devices: W lives in the store of
    the clients' states and moves with them (crossdevice/exchange.py), so nothing and the rows are both the stored
    rows (nothing: kept as the clients sent them), the summaries the relay's."""

    def __init__(self, store, d: int, exchange=None):
        self.store, self.d, self.exchange = store, d, exchange     # exchange: the ClientExchange (the relay's)
        self.Nothing = self.Rows = DeviceRows
        self.Summaries = ClusterRelay


class WhatLeaves(ClassKit):
    """The start-up line of what leaves each face client (docs/BASELINES.md, "What crosses the network"), picked by
    the method's class part as it picks its transports (ClassPart.party_side), so that no role asks its kind."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.n, self.d = cfg.clients.identities_per_client, cfg.model.embedding_size
        self.Nothing = self.Rows = self.kept
        self.Summaries = self.summarised

    def kept(self, part, kit) -> str:
        """The rows travel with the client's state even where no part steps on them."""
        return line(self.cfg, f"backbone, its class embeddings ({self.n} x {self.d} values; the server sees W for all "
                              f"{self.cfg.clients.population} clients: with one identity a client, its owner's face "
                              f"template)", "client")

    def summarised(self, part, kit) -> str:
        return line(self.cfg, f"backbone and its {part.client_sends(self.d, self.cfg.clients.rounds)}; in this "
                              f"simulation its class embeddings ({self.n} x {self.d} values) also travel to the server's "
                              f"store between its rounds, which a real device keeps: the method reads none of them",
                    "client")


class DeviceRows(NoClasses):
    """The rows of the clients seen so far, stepped on by `part` (None: kept as the clients sent them). Nothing
    travels here (NoClasses' post, wait and bytes: the exchange counts the rows with the clients' states). A client
    whose upload the server's check left out (`excluded`, in the order of the exchange's sampled `clients`) is left
    out of the round's class step, as a party is in the silo (silo/server_classes.py): the rows it sent are not
    stored, so they neither move nor push the others; it keeps its last good rows."""

    def __init__(self, part, kit: DeviceKit):
        self.store, self.d, self.part, self.exchange = kit.store, kit.d, part, kit.exchange
        self.row: dict | None = None
        self.total = None    # Σ ŵ over the seen rows (float64), kept up to date with the rows a round changes

    def step(self, r: int, lr: float, state: dict, excluded=None) -> None:
        store = self.store
        if self.exchange is not None:
            store.leave_out(excluded_clients(self.exchange.clients, excluded))
        seen = store.seen.nonzero().flatten()
        per = store.rows.shape[1] // self.d
        table = store.rows.view(-1, self.d)
        # W is the store's table itself when every client was seen: nothing gathered, nothing put back
        rows = None if len(seen) == len(store.rows) else rows_of(seen, per)
        self.replace(store.rows[store.returned], store.replaced)
        row = {}
        if self.part is not None and len(seen):
            W, row = step_kept(table, rows, lambda W: self.step_round(W, seen, per, lr, r, state))
        else:
            W = gathered(table, rows)
        if self.total is None:
            self.total = unit_sum(W)
        self.row = {"round": r, **row, "mean_cosine": cosine_of_sum(self.total, W.shape[0]),
                    "clients_seen": len(seen)}

    def step_round(self, W, seen: torch.Tensor, per: int, lr: float, r: int, state: dict) -> dict:
        """The part's step on the seen clients' rows W, the round's clients' rows its anchors; Σ ŵ follows."""
        anchors = self.anchors(seen, per)
        before = W[anchors].clone()
        row = self.part.step_round(W, IdentityBounds(W.shape[0]), anchors, lr, r, state)
        if self.part.anchored:
            self.replace(W[anchors], before)
        else:
            self.total = None
        return row

    def recorded(self) -> dict:
        """The rows the round's clients sent (row j of client c: its identity j), for core/received.py."""
        returned = torch.as_tensor(self.store.returned, dtype=torch.int64)
        per = self.store.rows.shape[1] // self.d
        return {"class_rows": self.store.rows[returned].reshape(-1, self.d),
                "class_row_sender": returned.repeat_interleave(per),
                "class_row_label": torch.arange(per).repeat(len(returned))}

    def replace(self, new, old) -> None:
        """Σ ŵ with the rows `old` replaced by `new`: O(rows d), where a sum over W would be O(M d)."""
        if self.total is not None:
            self.total += unit_sum(new.reshape(-1, self.d)) - unit_sum(old.reshape(-1, self.d))

    def anchors(self, seen: torch.Tensor, per: int) -> torch.Tensor:
        """The rows of W (the seen clients' rows, in client order) that the round's clients returned."""
        returned = torch.as_tensor(sorted(self.store.returned), dtype=torch.int64)
        return rows_of(torch.searchsorted(seen, returned), per)


class IdentityBounds(Sequence):
    """Every identity its own party in the part's step, [i, i + 1) for each of W's `rows` rows, made on use: a face
    client's positive-only loss pulls its images towards each of its own rows and pushes no row away from another,
    not even two of one album, so every other row is a negative of each (FedGC's Reg, spec §1.4: the softmax terms
    the clients' losses miss; with one identity a client, each client is one party). Made on use because FedGC's
    correction walks them all and the round-form spreadout none (a list of M tuples costs 20 ms a round at 85,742)."""

    def __init__(self, rows: int):
        self.rows = rows

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, i: int) -> tuple[int, int]:
        if not -self.rows <= i < self.rows:
            raise IndexError(i)
        i %= self.rows
        return i, i + 1


def columns(part_class) -> dict:
    """The log's `classes` table across devices: the part's columns and the spread of the rows."""
    return {**part_class.columns, **part_class.device_columns, **COLUMNS}
