"""One class-transport kit for both settings (algorithms/class_parts.py; docs/ARCHITECTURE.md, "The round loop and
its seams"). A class part picks its side from a kit, `part.party_side(kit)` on a trainer rank and
`part.server_side(kit)` on the server: kit.nothing(), kit.rows(part) or kit.summaries(part), so that no role asks
which kind of part it holds. A setting's kit names the sides it builds (`Nothing`, `Rows`, `Summaries`, each made
as Side(part, kit), part None for nothing) and carries only what they share: where W lives and how its
bytes move (silo/classes.py and silo/server_classes.py; crossdevice/album_clusters.py and class_rows.py).

A participant's side (a silo party's ranks, a cross-device trainer rank's clients) is called the same way in both
settings, every round, whatever the part: `prepare(r)` before the local steps, `upload(r)` after them, `download(r)`
after Θ arrived, `restored()` after a checkpoint was read, `state()` for what a checkpoint keeps of it. The server's
side is core/seams.py's class exchange; its nothing is NoClasses."""
from __future__ import annotations


class ClassKit:
    """The sides a class part picks from, one per kind; a setting's kit sets the classes. A new kind of part names
    its side here by `side(part, "Kind")` and each setting's kit sets `Kind`: this file does not change."""
    Nothing: type
    Rows: type
    Summaries: type

    def side(self, part, kind: str):
        return getattr(self, kind)(part, self)

    def nothing(self):
        return self.side(None, "Nothing")

    def rows(self, part):
        return self.side(part, "Rows")

    def summaries(self, part):
        return self.side(part, "Summaries")


class NoClassPayload:
    """A participant's side of a part that lets nothing of W leave (ClassPart): every call does nothing. `head`: the
    clients' objective head the side brings (a summary part's loss across devices), None where the setting's own
    serves."""
    head = None

    def __init__(self, part=None, kit: ClassKit | None = None):
        self.part = part

    def prepare(self, r: int) -> None:
        pass

    def upload(self, r: int) -> None:
        pass

    def download(self, r: int) -> None:
        pass

    def restored(self) -> None:
        pass

    def state(self) -> dict:
        """What the trainer part of a checkpoint keeps of it ({} nothing): live tensors, restored in place."""
        return {}
