"""The face clients' class embeddings on the server: the class exchange of the server's round loop (core/seams.py)
in the cross-device setting. The rows travel with the clients' states (crossdevice/exchange.py: w_c down to the
rank that trains c, back up after its round) into the store's table W [M, n·d] (crossdevice/client_state.py), so
nothing moves here; after each round the method's class part steps on the rows of every client seen so far (a
`RowsPart`: FedAwS's spreadout, FedGC's correction; W as the stacked rows of the silo, each identity one party,
identity_bounds) or nothing (positive-only FedAvg), or (a `SummaryPart`: PrivacyFace on albums) relays the clients'
DP clusters to the next cohort (crossdevice/cluster_relay.py), and the round's row of the log's `classes` table says
how far apart the rows are (the mean pairwise cosine: 1 is Yu et al.'s collapse)."""
from __future__ import annotations


from fedmpi.core.seams import NoClasses
from fedmpi.models.positive_only import mean_pairwise_cosine

COLUMNS = {"round": ((), "i8"), "mean_cosine": ((), "f8"), "clients_seen": ((), "i8")}


class DeviceKit:
    """What a class part picks its server side from (ClassPart.server_side), across devices."""

    def __init__(self, store, d: int, exchange=None):
        self.store, self.d, self.exchange = store, d, exchange     # exchange: the ClientExchange (the relay's)

    def nothing(self) -> "DeviceRows":
        return DeviceRows(self.store, self.d, None)

    def rows(self, part) -> "DeviceRows":
        return DeviceRows(self.store, self.d, part)

    def summaries(self, part):
        from fedmpi.crossdevice.cluster_relay import ClusterRelay

        return ClusterRelay(part, self, self.nothing())


class DeviceRows(NoClasses):
    """The rows of the clients seen so far, stepped on by `part` (None: kept as the clients sent them). Nothing
    travels here (NoClasses' post, wait and bytes: the exchange counts the rows with the clients' states)."""

    def __init__(self, store, d: int, part):
        self.store, self.d, self.part = store, d, part
        self.row: dict | None = None

    def step(self, r: int, lr: float, state: dict, excluded=None) -> None:
        store = self.store
        seen = store.seen.nonzero().flatten()
        W = store.rows[seen].reshape(-1, self.d)
        row = {}
        if self.part is not None and len(seen):
            row = self.part.step(W, identity_bounds(W.shape[0]), lr, r, state)
            store.rows[seen] = W.reshape(len(seen), -1)
        self.row = {"round": r, **row, "mean_cosine": mean_pairwise_cosine(W), "clients_seen": len(seen)}


def identity_bounds(rows: int) -> list[tuple[int, int]]:
    """Every identity its own party in the part's step: a face client's positive-only loss pulls its images towards
    each of its own rows and pushes no row away from another, not even two of one album, so every other row is a
    negative of each (FedGC's Reg, spec §1.4: the softmax terms the clients' losses miss; with one identity a
    client, each client is one party)."""
    return [(i, i + 1) for i in range(rows)]


def columns(part_class) -> dict:
    """The log's `classes` table across devices: the part's columns and the spread of the rows."""
    return {**part_class.columns, **part_class.device_columns, **COLUMNS}
