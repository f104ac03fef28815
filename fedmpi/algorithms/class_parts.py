"""A method's class part: what a party's classifier W_k contributes beyond θ_i (docs/BASELINES.md). Three kinds,
each a class; the default, `ClassPart` itself, lets nothing leave (FedFace's invariant: the classifier never
leaves its party).

  ClassPart     nothing                     due(r) is False: the silo moves nothing, the server steps on nothing
  RowsPart      W_k itself, to the server   step(W, bounds, lr, r, state) on the stacked W = [W_1; ...; W_P];
                                            each party gets its own rows back (FedAwS, FedGC)
  SummaryPart   a summary of W_k            summarise(W_k, out, r, party, state) on the party's leader;
                                            relay(uploads, replies, r, state) on the server: each party's reply
                                            from the others' summaries, kept by the party (PrivacyFace)

A part does arithmetic only. The silo moves its payloads: a part picks its transport from the silo's kit
(`party_side(kit)`, `server_side(kit)`: kit.nothing(), kit.rows(part) or kit.summaries(part)), so that no role
asks which kind it holds. Imports no torch at module level (the config reads the declared facts)."""
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
    """The party's leader summarises W_k; the server relays each party the other parties' summaries."""
    gathered = True

    def party_side(self, kit):
        return kit.summaries(self)

    def server_side(self, kit):
        return kit.summaries(self)

    def summary_shape(self, d: int) -> tuple[int, int]:
        """The [rows, columns] a party's summary of its d-dimensional class embeddings takes."""
        raise NotImplementedError

    def summarise(self, W, out, r: int, party: int, state: dict) -> None:
        """On the party's leader, fill `out` from the party's gathered class embeddings W [n_k, d]."""
        raise NotImplementedError

    def relay(self, uploads, replies, r: int, state: dict) -> dict:
        """Each party's reply [P, (P-1) rows, columns] from the summaries [P, rows, columns]. Returns the round's row
        of the log's `classes` table."""
        raise NotImplementedError
