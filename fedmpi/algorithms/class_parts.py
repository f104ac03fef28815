"""A method's class part: what a party's classifier W_k contributes beyond θ_i (docs/BASELINES.md). Three kinds,
each a class; the default, `ClassPart` itself, lets nothing leave (FedFace's invariant: the classifier never
leaves its party).

  ClassPart     nothing                     due(r) is False: the silo moves nothing, the server steps on nothing
  RowsPart      W_k itself, to the server   step(W, bounds, lr, r, state) on the stacked W = [W_1; ...; W_P];
                                            each party gets its own rows back (FedAwS, FedGC)
  SummaryPart   a summary of W_k            summarise(W, out, r, who, state) by each participant (a party's
                                            leader in the silo, each sampled client on its device); relay on
                                            the server: each party the others' summaries; across devices the
                                            server pools the last `kept_rounds` rounds' for the next cohort
                                            (PrivacyFace)

A part does arithmetic only. The setting moves its payloads: a part picks its transport from the setting's kit
(core/class_kit.py; `party_side(kit)`, `server_side(kit)`: kit.nothing(), kit.rows(part) or kit.summaries(part);
the silo's in silo/classes.py and silo/server_classes.py, the devices' in crossdevice/album_clusters.py and
class_rows.py), so that no role asks which kind it holds, and a setting calls nothing of a part but what these
classes declare.
Imports no torch at module level (the config reads the declared facts)."""
from __future__ import annotations

from typing import ClassVar


class ClassPart:
    """Nothing of W_k leaves its party."""
    leaves: ClassVar[str] = ""               # what leaves a party besides θ_i, in words ("" nothing)
    rows_to_server: ClassVar[bool] = False   # whether the server holds every party's W_k (DP, the memory check)
    gathered: ClassVar[bool] = False         # whether the party's leader gathers W_k (the memory check)
    columns: ClassVar[dict] = {}             # the log's `classes` table: what step / relay return
    device_columns: ClassVar[dict] = {}      # its further columns across devices (crossdevice/class_rows.py)

    def __init__(self, options=None, **_):
        self.options = options

    def due(self, r: int) -> bool:
        """Whether the class payload travels in round r (0-based)."""
        return False

    def party_side(self, kit):
        return kit.nothing()

    def server_side(self, kit):
        return kit.nothing()

    def server_state(self) -> dict:
        """What the part keeps in the server's rule state (checkpointed with it)."""
        return {}

    @property
    def resets_momentum(self) -> bool:
        """Whether a party zeroes its classifier momentum once the server's rows are written into its classifier."""
        return getattr(self.options, "class_momentum", "keep") == "reset"

    def note(self, state: dict) -> str:
        """The end of the round's progress line (PrivacyFace: the ε spent so far), or ''."""
        return ""

    def summary(self, state: dict) -> str:
        """A line for the run's closing summary, or ''."""
        return ""


class RowsPart(ClassPart):
    """W_k goes to the server, which steps on the stacked rows and sends each party its own back."""
    leaves = "class embeddings"
    rows_to_server = gathered = True

    def due(self, r):
        return True

    def party_side(self, kit):
        return kit.rows(self)

    def server_side(self, kit):
        return kit.rows(self)

    def step(self, W, bounds: list[tuple[int, int]], lr: float, r: int, state: dict) -> dict:
        """The server's step on the stacked class embeddings W [C, d], party k's rows W[bounds[k]], in place; lr:
        the round's learning rate. Returns the round's row of the log's `classes` table."""
        raise NotImplementedError

    anchored = False     # whether step_round moves the anchors' rows only

    def step_round(self, W, bounds: list[tuple[int, int]], anchors, lr: float, r: int, state: dict) -> dict:
        """The step where only some parties took part this round (a cross-device cohort): `anchors` [rows] the rows
        of W that are the round's parties'. By default every row is stepped on, as in `step`."""
        return self.step(W, bounds, lr, r, state)


class SummaryPart(ClassPart):
    """Each participant summarises its class embeddings; the server relays every participant the others'. A summary
    is `summary_shape(d)` rows [p (d) | α | valid], cones on the sphere (models/cone_negatives.py: a row whose last
    value is 0 holds none) that the receivers' margin heads add as extra negatives. The silo (silo/classes.py,
    silo/server_classes.py) and the devices (crossdevice/album_clusters.py, crossdevice/cluster_relay.py) call
    nothing but what this class declares."""
    gathered = True
    columns = {"round": ((), "i8"), "released": ((), "i8")}   # `released`: the round's valid summary rows
    # across devices (crossdevice/cluster_relay.py): the valid rows in the relayed pool, those the payload check
    # left out this round, and the bytes a real device sends and receives (θ + its summary; Θ + the pool)
    device_columns = {"pool": ((), "i8"), "left_out": ((), "i8"), "device_bytes_up": ((), "i8"),
                      "device_bytes_down": ((), "i8")}

    def due(self, r):
        return True

    def party_side(self, kit):
        return kit.summaries(self)

    def server_side(self, kit):
        return kit.summaries(self)

    @property
    def kept_rounds(self) -> int:
        """Across devices: how many rounds' summaries the server keeps and relays to the next cohort."""
        return 1

    def summary_shape(self, d: int) -> tuple[int, int]:
        """The [rows, columns] a participant's summary of its d-dimensional class embeddings takes."""
        raise NotImplementedError

    def summarise(self, W, out, r: int, who: int, state: dict, *, device: bool = False) -> None:
        """Fill `out` [summary_shape(d)] from one participant's class embeddings W [n, d] after its local steps of
        round r: in the silo a party's W_k gathered on its leader (who: the party's index; state: the rule's
        trainer state), across devices a sampled client's own rows on its device (who: the client's id;
        device=True; state: {}, a device keeps nothing of the rule's between its rounds)."""
        raise NotImplementedError

    def relay(self, uploads, replies, r: int, state: dict) -> dict:
        """Each party's reply [P, (P-1) rows, columns] from the summaries [P, rows, columns]. Returns the round's row
        of the log's `classes` table (its `released` among the part's columns)."""
        raise NotImplementedError

    def relayed(self, most: int, state: dict) -> dict:
        """Across devices, the part's columns of the round's `classes` row once the server pooled the round's
        summaries; most: the most summaries one client has sent so far (a client sends one each round it is
        sampled)."""
        return {}

    def client_sends(self, d: int, rounds: int) -> str:
        """What a client sends beside its backbone, in words, for the start-up line across devices."""
        q, width = self.summary_shape(d)
        return f"summary ({q} x {width} values a round it is sampled)"
