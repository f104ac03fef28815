"""A class payload is checked like a backbone upload (aggregation/class_payload_check.py), in both settings: the
issue's hostile party b among honest a and c — a PrivacyFace summary scaled by 10^30, FedAwS/FedGC rows scaled by
10^30, a NaN payload, a payload one row short (comm/message_end.py) — is named, left out of the round's class step,
and b keeps its own last good rows (the server's reply to it is no reply); a face client's hostile w_c or short
state likewise, the server keeping its last good rows."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from fedmpi.aggregation.class_payload_check import out_of_range
from fedmpi.algorithms.class_steps import bounds_of
from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.algorithms.fedaws import FedAwS, FedAwSOptions
from fedmpi.algorithms.fedgc import FedGC, FedGCOptions
from fedmpi.algorithms.privacyface import PrivacyFace, PrivacyFaceOptions
from fedmpi.comm.message_end import mark_end
from fedmpi.crossdevice.client_state import client_store
from fedmpi.models.cone_negatives import valid_cones


def rows(C, d, seed):
    return torch.nn.functional.normalize(torch.randn(C, d, generator=torch.Generator().manual_seed(seed),
                                                     dtype=torch.float64), dim=1)


def server_classes(rule, counts, d):
    from fedmpi.layout import Party
    from fedmpi.silo.server_classes import ServerKit

    parties = [Party(k, name, (k + 1,), ()) for k, name in enumerate("abc"[:len(counts)])]
    return rule.classes.server_side(ServerKit(parties, counts, d, None, "cpu", torch.float64, norm_ratio=10.0))


def test_the_verdict_names_what_is_not_finite_or_out_of_range():
    honest = [rows(3, 4, s) for s in range(3)]
    assert out_of_range(honest, 10.0) == [None, None, None]
    why = out_of_range([honest[0], honest[1] * 1e30, honest[2]], 10.0)
    assert why[0] is None and why[2] is None and why[1].startswith("out of range (its RMS value 5e+29 is 1e+30 x")
    nan = honest[2].clone()
    nan[1, 2] = float("nan")
    assert out_of_range([honest[0], honest[1], nan], 10.0)[2] == "not finite"


@pytest.mark.parametrize("rule", [FedAwS(FedAwSOptions(lr_scale=2.0)), FedGC(FedGCOptions(lr_scale=2.0))],
                         ids=["fedaws", "fedgc"])
@pytest.mark.parametrize("hostile", ["scaled", "nan"])
def test_hostile_rows_are_named_left_out_and_not_sent_back(rule, hostile, capsys):
    W = torch.cat([rows(3, 4, 0), rows(3, 4, 1), rows(3, 4, 2)])
    server = server_classes(rule, [3, 3, 3], 4)
    server.W.copy_(W)
    if hostile == "scaled":
        server.W[3:6] *= 1e30
    else:
        server.W[4, 1] = float("nan")
    alone = torch.cat([W[0:3], W[6:9]]).clone()
    rule.classes.step(alone, bounds_of([3, 3]), 0.5, 0, {})
    server.answer(0, 0.5, {})
    said = capsys.readouterr().out
    assert f"round 1: the class payload of party b is {'out of range' if hostile == 'scaled' else 'not finite'}" \
           in said and said.count("\n") == 1
    assert torch.equal(server.W[0:3], alone[0:3]) and torch.equal(server.W[6:9], alone[3:6])   # as if b were absent
    assert torch.isnan(server.W[3:6]).all()                   # b's reply: none, it keeps its own rows


def test_a_party_keeps_its_own_rows_when_the_server_sends_no_reply(monkeypatch):
    from fedmpi.silo import classes
    from fedmpi.silo.classes import PartyKit

    monkeypatch.setattr(classes.comm, "group_label", lambda name, group: name)   # one rank: no group to name

    own = rows(3, 4, 7).float()
    classifier = SimpleNamespace(weight=torch.nn.Parameter(own.clone()), class_start=0, class_end=3, num_classes=3,
                                 embedding_size=4)
    party = SimpleNamespace(leader=1, ranks=(1,), name="b", index=1)
    kit = PartyKit(party, 1, SimpleNamespace(party=None, leaders=None), classifier,
                   SimpleNamespace(momentum_buffers=[]), {}, 3, "cpu", torch.float32)
    side = FedAwS().classes.party_side(kit)
    side.W.copy_(own)
    for reply, expected in [(torch.full((3, 4), float("nan")), own), (own * 2, own * 2)]:
        side.receive = lambda into, reply=reply: into.copy_(reply)
        side.download(0)
        assert torch.equal(classifier.weight.detach(), expected)


def test_a_scaled_summary_is_not_relayed(capsys):
    rule = PrivacyFace(PrivacyFaceOptions(clusters=1))
    server = server_classes(rule, [5, 5, 5], 3)
    server.summaries.copy_(torch.tensor([[[1.0, 0, 0, 0.6, 1]], [[0, 1.0, 0, 0.6, 1]], [[0, 0, 1.0, 0.6, 1]]],
                                        dtype=torch.float64))
    server.summaries[1] *= 1e30
    server.answer(0, 0.1, {"releases": torch.zeros((), dtype=torch.int64)})
    assert "the class payload of party b is out of range" in capsys.readouterr().out
    assert valid_cones(server.replied[0]).tolist() == [[0, 0, 1.0, 0.6, 1]]   # a hears c only
    assert valid_cones(server.replied[1]).shape == (2, 5)                     # b still hears a and c


@pytest.mark.parametrize("hostile", [1e30, float("nan")])
def test_a_face_clients_hostile_rows_leave_the_store_at_its_last_good_rows(hostile, capsys):
    store = client_store(FedAvg(), [torch.zeros(2)], population=4, rows=3)
    good = [torch.tensor([1.0, 0, 0]), torch.tensor([0, 1.0, 0]), torch.tensor([0, 0, 1.0])]
    store.put_round(0, [(0, good[0]), (1, good[1]), (2, good[2])])
    store.put_round(1, [(0, good[1]), (1, good[2] * hostile), (2, good[0])])
    assert "round 2: the class embeddings of client 1 are" in capsys.readouterr().out
    assert torch.equal(store.get(1), good[1]) and torch.equal(store.get(0), good[1])


def short_message(buffer: torch.Tensor, values: torch.Tensor) -> None:
    """What a receive does with a message shorter than its marked buffer (tests/mpi/test_message_end.py, through
    gloo): the message fills the buffer's front, the rest keeps what it held, the mark included."""
    mark_end(buffer)
    buffer.reshape(-1)[:values.numel()] = values.reshape(-1)


@pytest.mark.parametrize("rule", [FedAwS(FedAwSOptions(lr_scale=2.0)), FedGC(FedGCOptions(lr_scale=2.0))],
                         ids=["fedaws", "fedgc"])
def test_rows_one_row_short_are_named_wrongly_shaped_and_left_out(rule, capsys):
    W = torch.cat([rows(3, 4, 0), rows(3, 4, 1), rows(3, 4, 2)])
    server = server_classes(rule, [3, 3, 3], 4)
    server.W.copy_(W)
    short_message(server.uploads[1], rows(2, 4, 5))            # b sends 2 of its 3 rows
    alone = torch.cat([W[0:3], W[6:9]]).clone()
    rule.classes.step(alone, bounds_of([3, 3]), 0.5, 0, {})
    server.answer(0, 0.5, {})
    said = capsys.readouterr().out
    assert said == ("round 1: the class payload of party b is wrongly shaped (shorter than the 3 x 4 values the "
                    "server expects of it): left out of the round's class step\n")
    assert torch.equal(server.W[0:3], alone[0:3]) and torch.equal(server.W[6:9], alone[3:6])
    assert torch.isnan(server.W[3:6]).all()                    # no reply: b keeps its own rows


def test_a_summary_one_row_short_is_not_relayed(capsys):
    rule = PrivacyFace(PrivacyFaceOptions(clusters=2))
    server = server_classes(rule, [5, 5, 5], 3)
    cones = torch.tensor([[[1.0, 0, 0, 0.6, 1], [0, 0, 0, 0, 0]], [[0, 1.0, 0, 0.6, 1], [0, 0, 0, 0, 0]],
                          [[0, 0, 1.0, 0.6, 1], [0, 0, 0, 0, 0]]], dtype=torch.float64)
    server.summaries.copy_(cones)
    short_message(server.uploads[1], cones[1, :1])             # b's first cluster only
    server.answer(0, 0.1, {"releases": torch.zeros((), dtype=torch.int64)})
    assert "the class payload of party b is wrongly shaped (shorter than the 2 x 5 values" in capsys.readouterr().out
    assert valid_cones(server.replied[0]).tolist() == [[0, 0, 1.0, 0.6, 1]]   # a hears c only
    assert valid_cones(server.replied[2]).tolist() == [[1.0, 0, 0, 0.6, 1]]   # c hears a only


def test_a_face_clients_short_state_is_not_stored(capsys):
    from fedmpi.algorithms.scaffold import Scaffold

    store = client_store(Scaffold(), [torch.zeros(2)], population=3, rows=3)    # c_i (2 values), then w_c (3)
    first = [torch.tensor([0.5, 0.5, 1.0, 0, 0]), torch.tensor([0.1, 0.2, 0, 1.0, 0])]
    store.put_round(0, [(0, first[0]), (1, first[1])])
    returned = [store.get(0), store.get(1)]
    returned[0].copy_(torch.tensor([0.7, 0.7, 0, 0, 1.0]))
    short_message(returned[1], torch.tensor([9.0, 9.0, 0, 0]))               # one value short
    store.put_round(1, [(0, returned[0]), (1, returned[1])])
    assert capsys.readouterr().out == ("round 2: the state of client 1 is wrongly shaped (shorter than its 5 values): "
                                       "left out, its last good state and rows kept\n")
    assert torch.equal(store.get(1), first[1]) and torch.equal(store.get(0), torch.tensor([0.7, 0.7, 0, 0, 1.0]))
