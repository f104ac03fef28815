"""The one class-transport kit (core/class_kit.py) and the rows step both settings' servers share
(core/server_rows.py)."""
import torch

from fedmpi.algorithms.class_parts import ClassPart, RowsPart, SummaryPart
from fedmpi.core.class_kit import ClassKit, NoClassPayload
from fedmpi.core.seams import NoClasses
from fedmpi.core.server_rows import kept_rows, rows_of, step_kept


class Side:
    def __init__(self, part, kit):
        self.part, self.kit = part, kit


class Rows(Side):
    pass


class Summaries(Side):
    pass


def test_each_kind_of_part_picks_its_side_from_the_one_kit_on_both_ends():
    kit = ClassKit()
    kit.Nothing, kit.Rows, kit.Summaries = Side, Rows, Summaries
    rows, summary = RowsPart(), SummaryPart()
    for pick in ("party_side", "server_side"):
        nothing = getattr(ClassPart(), pick)(kit)
        assert type(nothing) is Side and nothing.part is None and nothing.kit is kit
        assert type(getattr(rows, pick)(kit)) is Rows and getattr(rows, pick)(kit).part is rows
        assert type(getattr(summary, pick)(kit)) is Summaries and getattr(summary, pick)(kit).part is summary


def test_a_new_kind_of_part_names_its_side_and_each_kit_sets_it_the_kit_unchanged():
    class Sketch(ClassPart):
        def party_side(self, kit):
            return kit.side(self, "Sketches")

    kit = ClassKit()
    kit.Sketches = Summaries
    part = Sketch()
    assert type(part.party_side(kit)) is Summaries and part.party_side(kit).part is part


def test_nothing_is_one_side_on_a_participant_and_one_on_the_server():
    kit = ClassKit()
    kit.Nothing = NoClassPayload
    side = ClassPart().party_side(kit)
    assert side.head is None and side.state() == {}
    assert [side.prepare(0), side.upload(0), side.download(0), side.restored()] == [None] * 4
    kit.Nothing = NoClasses
    server = ClassPart().server_side(kit)
    assert server.row is None and server.is_complete() and server.bytes_per_round() == {"up": 0, "down": 0, "intra": 0}


def test_the_kept_blocks_rows_in_block_order_or_all_of_w():
    assert kept_rows([(0, 2), (2, 3), (3, 5)], [True, False, True]).tolist() == [0, 1, 3, 4]
    assert kept_rows([(0, 2), (2, 3)], [True, True]) is None
    assert rows_of(torch.tensor([1, 3]), 2).tolist() == [2, 3, 6, 7]


def test_the_step_runs_on_w_in_place_or_on_a_copy_written_back():
    W = torch.arange(10.0).reshape(5, 2)

    def double(rows):
        rows.mul_(2)
        return {"rows": rows.shape[0]}

    kept, row = step_kept(W, torch.tensor([1, 3]), double)
    assert row == {"rows": 2} and kept.tolist() == [[4.0, 6.0], [12.0, 14.0]]
    assert W.tolist() == [[0.0, 1.0], [4.0, 6.0], [4.0, 5.0], [12.0, 14.0], [8.0, 9.0]]
    kept, row = step_kept(W, None, double)
    assert kept is W and row == {"rows": 5} and W[0].tolist() == [0.0, 2.0] and W[4].tolist() == [16.0, 18.0]


def test_every_setting_s_kit_picks_its_nothing_through_the_one_kit():
    """A kit's own attributes leave the kit's methods callable (a trainer side kept as `side` once hid `side`)."""
    from types import SimpleNamespace

    from fedmpi.crossdevice.album_clusters import ClientKit
    from fedmpi.crossdevice.class_rows import DeviceKit, DeviceRows
    from fedmpi.silo.classes import PartyKit
    from fedmpi.silo.server_classes import ServerKit

    here = SimpleNamespace(group=None)
    kits = {PartyKit(here, 0, here, None, None, {}, 1, "cpu", torch.float32): NoClassPayload,
            ServerKit([], [], 3, None, "cpu", torch.float32): NoClasses,
            ClientKit(None, None, None, here, "cpu", torch.float32): NoClassPayload,
            DeviceKit(None, 3): DeviceRows}
    for kit, nothing in kits.items():
        side = ClassPart().party_side(kit)
        assert type(side) is nothing
