"""Secure aggregation as one pair of wrappers (core/secure_exchange.py around any exchange, core/secure_participant.py
around any carrier's uploads), run in one process over an in-memory control channel: a round whose carriers hold
one participant (a silo party's leader) or several (a trainer rank's clients) decodes the participants' weighted
mean update; a participant that breaks the protocol is named as the wrapped exchange names it; the trainers never
ask whether the run is secure; the message tags live in one module and no two collide."""
from __future__ import annotations

import ast
import pickle
import threading
from collections import defaultdict, deque
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedmpi.comm import tags
from fedmpi.config import load_config
from fedmpi.core.context import Control
from fedmpi.core.secure_exchange import SecureExchange, secure_or_plain as secure_exchange
from fedmpi.core.secure_participant import secure_or_plain as secure_uploads
from fedmpi.core.secure_uploads import encoding
from fedmpi.core.what_leaves import line
from fedmpi.secagg import ProtocolError

ROOT = Path(__file__).resolve().parents[2]
SECURE = ["clients.population=6", "clients.fraction=0.5", "run.device=cpu", "fed.secure_aggregation.mode=secagg",
          "fed.secure_aggregation.clipping_range=4", "fed.secure_aggregation.quantization_bits=20"]
BACKBONE, UP = 5, 7                     # [θ (5) | an up payload (2)]
SIZES = np.array([10.0, 3.0, 6.0, 1.0, 4.0, 2.0])


class Mailboxes:
    """MPI's point-to-point messages between ranks of one process, copied as MPI copies them."""

    def __init__(self):
        self.boxes, self.lock = defaultdict(deque), threading.Lock()

    def endpoint(self, rank: int):
        boxes, lock = self.boxes, self.lock

        class Endpoint:
            __hash__ = object.__hash__

            def __eq__(self, other):        # its ranks are COMM_WORLD's (what a timeout names)
                return True

            def isend(self, value, dest, tag):
                with lock:
                    boxes[(rank, dest, tag)].append(pickle.dumps(value))
                return SimpleNamespace(Test=lambda: True)

            def Iprobe(self, source, tag, status=None):
                with lock:
                    ready = bool(boxes[(source, rank, tag)])
                if ready and status is not None:
                    status.Set_source(source)
                return ready

            def recv(self, source, tag):
                with lock:
                    return pickle.loads(boxes[(source, rank, tag)].popleft())

        return Endpoint()


class Clients:
    """The wrapped exchange of a cross-device round: clients 0 and 2 on trainer rank 1, client 4 on rank 2."""
    participation, carried = 0.5, [(1, [0, 2]), (2, [4])]

    def __init__(self, control):
        self.control, self.participants = control, [0, 2, 4]
        self.upload_names = [self.participant_name(k) for k in self.participants]

    def carriers(self, r):
        return self.carried

    def participant_name(self, k):
        return f"client {k}"

    def send(self, down):
        pass

    def bytes_per_round(self):
        return {"up": 0, "down": 0, "intra": 0}


def run_round(carried: dict[int, list[int]], uploads: dict[int, torch.Tensor], down: torch.Tensor):
    """The server's side in this thread, each carrier's in a thread of its own; the server's exchange."""
    cfg = load_config("configs/hsu_cifar10.yaml", SECURE)
    mail = Mailboxes()
    inner = Clients(Control(mail.endpoint(0), 5.0))
    exchange = secure_exchange(cfg, inner, UP, BACKBONE)
    failures = []

    def carrier(rank: int, participants: list[int]) -> None:
        try:
            side = secure_uploads(cfg, None, Control(mail.endpoint(rank), 5.0), lambda k: f"client {k}", SIZES,
                                  BACKBONE, UP)
            side.begin(0, participants, down)
            for k in participants:
                side.each(uploads[k])
            side.end()
        except Exception as exc:          # noqa: BLE001 - a carrier left waiting by a refused run
            failures.append(exc)

    threads = [threading.Thread(target=carrier, args=item, daemon=True) for item in carried.items()]
    for t in threads:
        t.start()
    exchange.send(down)
    exchange.post(0)
    exchange.wait()
    for t in threads:
        t.join()
    return cfg, exchange, failures


def test_a_round_decodes_the_weighted_mean_of_the_participants_updates():
    gen = torch.Generator().manual_seed(0)
    down = torch.randn(UP, generator=gen, dtype=torch.float64)
    uploads = {k: down + torch.rand(UP, generator=gen, dtype=torch.float64) - 0.5 for k in (0, 2, 4)}
    cfg, exchange, failures = run_round(dict(Clients.carried), uploads, down)
    assert isinstance(exchange, SecureExchange) and failures == []
    w = SIZES[[0, 2, 4]] / SIZES.max()
    ref = torch.cat([down[:BACKBONE], torch.zeros(UP - BACKBONE, dtype=torch.float64)])
    expected = ref + sum(float(wk) * (uploads[k] - ref) for wk, k in zip(w, (0, 2, 4))) / w.sum()
    got = exchange.weighted_mean(None, torch.empty(UP, dtype=torch.float64))
    enc = encoding(cfg)
    assert (got - expected).abs().max() <= enc.error_bound(3, w.sum()) + 1e-12
    assert exchange.rows is None and not exchange.gives_uploads
    assert exchange.bytes_per_round()["up"] == 2 * (UP + 1) * 4       # two carriers' masked words (uint32)


def test_a_participant_outside_the_round_is_named_as_the_exchange_names_it():
    down = torch.zeros(UP, dtype=torch.float64)
    uploads = {k: torch.zeros(UP, dtype=torch.float64) for k in (0, 2, 9)}
    with pytest.raises(ProtocolError, match=r"^round 1: secure aggregation: client 9: not sampled this round"):
        run_round({1: [0, 2], 2: [9]}, uploads, down)


def test_without_secure_aggregation_both_wrappers_give_back_the_plain_side():
    cfg = load_config("configs/hsu_cifar10.yaml", SECURE[:3])
    plain = object()
    assert secure_exchange(cfg, plain, UP, BACKBONE) is plain
    assert secure_uploads(cfg, plain, None, str, SIZES, BACKBONE, UP) is plain


def test_the_what_leaves_line_says_masked_in_both_settings():
    cfg = load_config("configs/hsu_cifar10.yaml", SECURE)
    assert line(cfg, "backbone") == ("what leaves each party: backbone, masked (secagg: the server sees only the "
                                     "parties' weighted sum, their weights summed beside it)")
    assert line(cfg, "backbone, its class embeddings", "client").endswith("only the clients' weighted sum, their "
                                                                          "weights summed beside it)")
    assert line(load_config("configs/hsu_cifar10.yaml", SECURE[:3]), "backbone") == "what leaves each party: backbone"


def test_the_trainers_never_ask_whether_the_run_is_secure():
    for trainer in ("fedmpi/silo/trainer.py", "fedmpi/crossdevice/trainer.py"):
        names = {n.id if isinstance(n, ast.Name) else n.attr
                 for n in ast.walk(ast.parse((ROOT / trainer).read_text()))
                 if isinstance(n, (ast.Name, ast.Attribute))}
        assert not [n for n in names if "secure" in n.lower()], trainer


def test_every_message_tag_is_declared_once_and_none_collide():
    """comm/tags.py holds every tag; no other module assigns a TAG constant; no two tags of one transport meet."""
    declared = {name: value for name, value in vars(tags).items() if name.isupper()}
    torch_tags = [v for v in declared.values() if v < 100]
    mpi_tags = [v for v in declared.values() if v >= 100]
    assert len(set(torch_tags)) == len(torch_tags) and len(set(mpi_tags)) == len(mpi_tags)
    elsewhere = []
    for path in (ROOT / "fedmpi").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and path.name != "tags.py":
                targets = [t for n in node.targets for t in (n.elts if isinstance(n, ast.Tuple) else [n])]
                elsewhere += [f"{path.relative_to(ROOT)}: {t.id}" for t in targets
                              if isinstance(t, ast.Name) and "TAG" in t.id.split("_")]
    assert elsewhere == []


def test_the_key_stages_run_beside_the_training_and_their_failure_surfaces_after_it():
    """`begin` returns with the key stages still waiting for the server (here there is none), so the participants
    train meanwhile; what the stages raised comes out of the next call that needs them."""
    from fedmpi.comm import CommTimeout

    cfg = load_config("configs/hsu_cifar10.yaml", SECURE)
    side = secure_uploads(cfg, None, Control(Mailboxes().endpoint(1), 0.3), str, SIZES, BACKBONE, UP)
    side.begin(0, [0, 2], torch.zeros(UP, dtype=torch.float64))
    with pytest.raises(CommTimeout, match="round 1: the SecAgg session"):
        side.end()


def test_where_mpi_allows_no_second_thread_the_key_stages_run_in_line(monkeypatch):
    """A site's MPI without MPI_THREAD_MULTIPLE: `begin` runs the key stages itself (no thread), and what they raised
    still comes out of the next call that needs them."""
    from fedmpi.comm import CommTimeout
    from fedmpi.core import secure_participant

    monkeypatch.setattr(secure_participant, "threads_allowed", lambda: False)
    cfg = load_config("configs/hsu_cifar10.yaml", SECURE)
    side = secure_uploads(cfg, None, Control(Mailboxes().endpoint(1), 0.3), str, SIZES, BACKBONE, UP)
    side.begin(0, [0, 2], torch.zeros(UP, dtype=torch.float64))
    assert side.keys.thread is None
    with pytest.raises(CommTimeout, match="round 1: the SecAgg session"):
        side.end()
