"""The face clients of the cross-device setting (crossdevice/face_clients.py, client_heads.py, class_rows.py):
the device's positive-only loss and its gradient and the server's spreadout against float64 references written
from the spec (fr_baselines_spec §2.3-2.4, docs/BASELINES.md), on random cases; the collapse measure; the
partition into clients; the config's refusals."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fedmpi.algorithms.spreadout import spreadout_step
from fedmpi.crossdevice.face_clients import face_partition
from fedmpi.models.positive_only import mean_pairwise_cosine, positive_loss

D64 = torch.float64


def reference_positive(rows, f, labels, nu):
    """ℓ_pos and its gradients by hand: c = ŵ·f̂, ℓ = mean (max(0, ν − c))², ∂c/∂f = (ŵ − c f̂)/‖f‖."""
    b = len(labels)
    w = rows[labels]
    wn, fn = w.norm(dim=1, keepdim=True), f.norm(dim=1, keepdim=True)
    w_hat, f_hat = w / wn, f / fn
    c = (w_hat * f_hat).sum(1)
    r = (nu - c).clamp(min=0)
    dl_dc = (-2 * r / b).unsqueeze(1)
    grad_f = dl_dc * (w_hat - c.unsqueeze(1) * f_hat) / fn
    grad_w = torch.zeros_like(rows).index_add_(0, labels, dl_dc * (f_hat - c.unsqueeze(1) * w_hat) / wn)
    return (r ** 2).mean(), grad_f, grad_w


@pytest.mark.parametrize("seed", range(6))
def test_the_positive_loss_and_its_gradients_equal_the_spec_in_float64(seed):
    g = torch.Generator().manual_seed(seed)
    n, b, d = 1 + seed % 3, 5 + seed, 7
    rows = torch.randn(n, d, generator=g, dtype=D64).requires_grad_(True)
    f = torch.randn(b, d, generator=g, dtype=D64)
    f[0] = rows[0].detach() * 3.0              # a sample past the margin (cos 1 > 0.9): no gradient from it
    f.requires_grad_(True)
    labels = torch.randint(0, n, (b,), generator=g)
    labels[0] = 0
    loss = positive_loss(rows, f, labels, 0.9)
    loss.backward()
    value, grad_f, grad_w = reference_positive(rows.detach(), f.detach(), labels, 0.9)
    assert abs(float(loss.detach()) - float(value)) < 1e-14
    assert torch.allclose(f.grad, grad_f, atol=1e-14, rtol=0) and f.grad[0].abs().max() == 0
    assert torch.allclose(rows.grad, grad_w, atol=1e-14, rtol=0)


def test_the_positive_loss_of_a_known_case():
    rows = torch.tensor([[1.0, 0.0]], dtype=D64)
    f = torch.tensor([[1.0, 1.0], [0.0, 2.0]], dtype=D64)    # cosines 1/√2 and 0
    expected = ((0.9 - 2 ** -0.5) ** 2 + 0.9 ** 2) / 2
    assert abs(float(positive_loss(rows, f, torch.tensor([0, 0]), 0.9)) - expected) < 1e-15


def reference_spreadout_step(W, lr, tau):
    """One plain step on L = (1/(C(C−1))) Σ_{c≠c'} max(0, ŵ_c·ŵ_c' − τ)², differentiated through ŵ = w/‖w‖ by hand:
    ∂L/∂ŵ_c = (4/(C(C−1))) Σ_{c'≠c} r_cc' ŵ_c', then ∂L/∂w_c = (I − ŵ_c ŵ_cᵀ) ∂L/∂ŵ_c / ‖w_c‖."""
    C = W.shape[0]
    norms = W.norm(dim=1, keepdim=True)
    U = W / norms
    r = (U @ U.T - tau).clamp(min=0)
    r.fill_diagonal_(0)
    loss = float((r ** 2).sum()) / (C * (C - 1))
    g_hat = 4.0 / (C * (C - 1)) * (r @ U)
    g = (g_hat - (g_hat * U).sum(1, keepdim=True) * U) / norms
    return loss, W - lr * g


@pytest.mark.parametrize("seed", range(5))
def test_the_servers_spreadout_step_equals_the_spec_in_float64(seed):
    g = torch.Generator().manual_seed(100 + seed)
    C, d = 3 + 2 * seed, 4
    W = torch.randn(C, d, generator=g, dtype=D64)
    W[1] = W[0] + 0.05 * torch.randn(d, generator=g, dtype=D64)      # a pair closer than τ for sure
    loss, expected = reference_spreadout_step(W.clone(), 0.3, 0.2)
    moved = W.clone()
    assert abs(spreadout_step(moved, 0.3, 0.2) - loss) < 1e-13 and loss > 0
    assert torch.allclose(moved, expected, atol=1e-13, rtol=0)


def test_the_mean_pairwise_cosine():
    assert mean_pairwise_cosine(torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0]])) == pytest.approx(1 / 3, abs=1e-15)
    assert mean_pairwise_cosine(torch.ones(5, 3)) == pytest.approx(1.0, abs=1e-15)   # collapsed
    g = torch.Generator().manual_seed(0)
    W = torch.randn(7, 5, generator=g, dtype=D64)
    U = W / W.norm(dim=1, keepdim=True)
    pairs = (U @ U.T).sum() - 7
    assert mean_pairwise_cosine(W) == pytest.approx(float(pairs) / 42, abs=1e-14)


def test_each_client_holds_its_identities_images():
    labels = np.array([2, 0, 1, 0, 3, 2, 1, 5, 4])
    assert [p.tolist() for p in face_partition(labels, 3, 2)] == [[1, 2, 3, 6], [0, 4, 5], [7, 8]]
    assert [p.tolist() for p in face_partition(labels, 2, 1)] == [[1, 3], [2, 6]]


@pytest.mark.parametrize("overrides, message", [
    (["clients.population=20", "clients.faces.identities=10"],
     "clients.population: 20 clients x 1 identities exceed the 10 identities of clients.faces"),
    (["clients.population=4", "clients.cohort=vectorised"],
     "clients.cohort: vectorised: the face clients' IResNet keeps BatchNorm statistics"),
    (["clients.population=4", "clients.positive_margin=1.5"], "clients.positive_margin: ν_pos is a cosine"),
    (["clients.population=4", "fed.setting=centralized"], "fed.setting: centralized: one client holding every face"),
    (["clients.population=4", "fed.algorithm=fedfr"], "fed.algorithm: fedfr trains each silo party's own objective"),
    (["clients.population=4", "fed.algorithm=fedgc", "fed.dp.enabled=true"],
     "fed.dp.enabled: fedgc uploads every party's class embeddings W_k, which DP-FedAvg neither clips nor noises"),
    (["clients.population=4", "fv.enabled=true"], "fv.enabled: FV weights silo parties"),
    (["clients.population=4", "clients.batch_norm=running"],
     "clients.batch_norm: must be one of frozen, batch, got 'running'"),
    (["clients.population=4", "parties.ms1m.attack.short_rows=1"],
     "parties.ms1m.attack.short_rows: only a party of the federated (or solo) layout uploads"),
])
def test_the_config_refuses_face_clients_in_one_line(overrides, message):
    from fedmpi.config import ConfigError, load_config

    with pytest.raises(ConfigError) as caught:
        load_config(None, ["clients.dataset=faces", *overrides])
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_face_benchmarks_are_refused_for_the_cifar_clients_in_one_line():
    from fedmpi.config import ConfigError, load_config

    with pytest.raises(ConfigError) as caught:
        load_config(None, ["clients.population=4", "eval.every=1", "eval.sets.ijbc=synthetic"])
    assert str(caught.value) == ("eval.sets.ijbc: evaluates face embeddings; the cross-device clients of "
                                 "clients.dataset=synthetic train a CIFAR CNN (clients.dataset=faces: an IResNet)")
    load_config(None, ["clients.population=4", "clients.dataset=faces", "clients.faces.identities=4", "eval.every=1",
                       "eval.sets.ijbc=synthetic"])


def test_model_init_is_read_by_face_clients_only():
    from fedmpi.config import ConfigError, load_config

    cfg = load_config(None, ["clients.population=4", "clients.dataset=faces", "model.init=x.pth"])
    assert cfg.clients.face_clients and not cfg.clients.vectorised(cfg, "cuda")
    with pytest.raises(ConfigError, match="clients.dataset=synthetic train a CIFAR CNN"):
        load_config(None, ["clients.population=4", "model.init=x.pth"])


def test_the_server_keeps_each_clients_rows_and_returns_them_when_it_is_next_sampled():
    from fedmpi.algorithms.scaffold import Scaffold
    from fedmpi.crossdevice.client_state import client_store

    params = [torch.zeros(2, 2), torch.zeros(3)]
    store = client_store(Scaffold(), params, population=5, rows=4)    # c_i (7 values), then w_c (4 values)
    assert store.layout.numel == 11 and store.rows.shape == (5, 4) and not store.seen.any()
    assert torch.equal(store.get(3), torch.zeros(11))                 # never sampled: zeros, w_c to initialise
    sent = torch.arange(11, dtype=torch.float32)
    store.put(3, sent)
    assert torch.equal(store.get(3), sent) and store.seen.tolist() == [False, False, False, True, False]
    other = client_store(Scaffold(), params, population=5, rows=4)
    other.load_state_dict(store.state_dict())
    assert torch.equal(other.get(3), sent) and torch.equal(other.seen, store.seen)
    assert client_store(Scaffold(), params).get(1).numel() == 7       # the CIFAR clients: no rows


def test_the_memory_check_sizes_w_for_all_clients_and_refuses_with_the_population_that_fits():
    from fedmpi.config import load_config
    from fedmpi.memory.check import FIT_SHARE, SERVER_BASE, judge_client_states
    from fedmpi.memory.model import client_states

    cfg = load_config(None, ["clients.dataset=faces", "clients.population=85742", "clients.faces.identities=85742",
                             "model.embedding_size=512", "clients.rounds=10", "fed.algorithm=fedaws"])
    held, need = client_states(cfg)
    assert held == 85742 and need == 85742 * 512 * 4          # W of every client, float32; FedAwS keeps no state
    half = int((SERVER_BASE + need / 2) / FIT_SHARE)          # room for half of W
    said = judge_client_states(cfg, available=half)
    assert said.startswith("run.memory_check: fedaws keeps each client's state on the server: up to 85,742 clients "
                           "x 2.0 KB = 0.2 GB")
    assert "clients.population=42870 fits" in said and "\n" not in said
    assert judge_client_states(cfg, available=8 * 1024 ** 3) is None


@pytest.mark.parametrize("name", ["fedavg", "fedaws", "fedaws-all", "fedgc"])
def test_the_servers_class_step_across_devices_moves_only_the_rows_seen(name):
    """The store's W as the silo's stacked rows, each client one party: FedAwS and FedGC move the rows of the
    clients seen so far, positive-only FedAvg none; the unseen rows stay zero; the row of the log says how far
    apart the rows are."""
    from fedmpi.algorithms.fedavg import FedAvg
    from fedmpi.algorithms.fedaws import FedAwS, FedAwSOptions
    from fedmpi.algorithms.fedgc import FedGC, FedGCOptions
    from fedmpi.crossdevice.class_rows import DeviceKit
    from fedmpi.crossdevice.client_state import client_store

    rule = {"fedavg": FedAvg(), "fedaws": FedAwS(FedAwSOptions(lr_scale=5.0)),
            "fedaws-all": FedAwS(FedAwSOptions(lr_scale=5.0, rows="all")),
            "fedgc": FedGC(FedGCOptions(lr_scale=5.0))}[name]
    store = client_store(FedAvg(), [torch.zeros(1)], population=5, rows=3)
    near = [torch.tensor([1.0, 0.1, 0.0]), torch.tensor([1.0, 0.0, 0.1]), torch.tensor([1.0, -0.1, 0.0])]
    store.put_round(0, [(0, near[0]), (2, near[1]), (3, near[2])])
    before = store.rows.clone()
    exchange = rule.classes.server_side(DeviceKit(store, 3))
    exchange.step(0, 0.1, {})
    assert exchange.row["clients_seen"] == 3 and exchange.row["round"] == 0
    assert (store.rows[[1, 4]] == 0).all()
    moved = not torch.equal(store.rows, before)
    assert moved == (name != "fedavg")
    assert mean_pairwise_cosine(store.rows[[0, 2, 3]]) <= mean_pairwise_cosine(before[[0, 2, 3]]) + 1e-12


@pytest.mark.parametrize("rows, per", [("round", 1), ("all", 1), ("round", 2), ("cohort", 1), ("cohort", 2)])
def test_fedaws_moves_the_rounds_rows_against_all_of_w_or_among_themselves_or_every_row(rows, per):
    """rows=round: the clients of the round are the anchors (their rows move, against every row seen: the step of
    spreadout_round.py on the seen rows in client order), the rows of earlier rounds' clients stay; rows=cohort: the
    round's rows alone, spread among themselves (the all-rows step of spreadout.py on them: FedFR's code), the other
    rows neither moving nor pushing; rows=all: every seen row moves (spreadout.py). An album client (per = 2 rows)
    moves both its rows."""
    from fedmpi.algorithms.fedavg import FedAvg
    from fedmpi.algorithms.fedaws import FedAwS, FedAwSOptions
    from fedmpi.algorithms.spreadout import spreadout_step
    from fedmpi.algorithms.spreadout_round import round_spreadout_step
    from fedmpi.crossdevice.class_rows import DeviceKit
    from fedmpi.crossdevice.client_state import client_store

    g = torch.Generator().manual_seed(3)
    d = 4
    store = client_store(FedAvg(), [torch.zeros(1)], population=7, rows=per * d)
    close = torch.tensor([1.0, 0.2, 0.0, 0.0]).repeat(per) + 0.1 * torch.randn(7, per * d, generator=g)
    store.put_round(0, [(k, close[k]) for k in (0, 2, 5)])
    store.put_round(1, [(k, close[k]) for k in (1, 5, 6)])
    before = store.rows.clone()
    exchange = FedAwS(FedAwSOptions(lr_scale=5.0, rows=rows)).classes.server_side(DeviceKit(store, d))
    exchange.step(1, 0.1, {})
    seen = [0, 1, 2, 5, 6]
    expected = before[seen].reshape(-1, d).clone()
    if rows == "round":
        anchors = torch.tensor([p * per + j for p in (1, 3, 4) for j in range(per)])   # clients 1, 5, 6 among seen
        loss = round_spreadout_step(expected, anchors, 0.5, 0.4)
    elif rows == "cohort":
        anchors = torch.tensor([p * per + j for p in (1, 3, 4) for j in range(per)])
        cohort = expected[anchors]
        loss = spreadout_step(cohort, 0.5, 0.4)
        expected[anchors] = cohort
    else:
        loss = spreadout_step(expected, 0.5, 0.4)
    assert exchange.row["spreadout"] == loss and loss > 0
    assert torch.equal(store.rows[seen].reshape(-1, d), expected)
    moved = (store.rows != before).any(dim=1).tolist()
    assert moved == ([True, True, True, False, False, True, True] if rows == "all"
                     else [False, True, False, False, False, True, True])


def test_fedaws_rows_is_round_cohort_or_all_in_one_line():
    from fedmpi.algorithms.fedaws import FedAwSOptions
    from fedmpi.config import ConfigError, load_config

    assert FedAwSOptions().rows == "round"
    for rows in ("all", "cohort"):
        load_config("configs/faces_devices.yaml", [f"fed.options.rows={rows}"])
    with pytest.raises(ConfigError) as caught:
        load_config("configs/faces_devices.yaml", ["fed.options.rows=clients"])
    assert str(caught.value) == ("fed.options.rows: 'clients' is not one of round, cohort, all (the rows the "
                                 "server's spreadout moves: the round's against every row, the round's among "
                                 "themselves, or every row)")


@pytest.mark.parametrize("name", ["fedavg", "fedaws", "fedaws-all"])
def test_the_collapse_measure_kept_from_the_rows_a_round_changes_equals_it_over_all_of_w(name):
    """W's mean pairwise cosine as the server logs it each round (Σ ŵ updated with the returned rows and the rows the
    class step moved) against mean_pairwise_cosine over all the seen rows, round after round, clients returning
    again, a client's rows left out (out of range) and a resumed server that starts from the store."""
    from fedmpi.algorithms.fedavg import FedAvg
    from fedmpi.algorithms.fedaws import FedAwS, FedAwSOptions
    from fedmpi.crossdevice.class_rows import DeviceKit
    from fedmpi.crossdevice.client_state import client_store

    rule = {"fedavg": FedAvg(), "fedaws": FedAwS(FedAwSOptions(lr_scale=5.0)),
            "fedaws-all": FedAwS(FedAwSOptions(lr_scale=5.0, rows="all"))}[name]
    g = torch.Generator().manual_seed(5)
    store = client_store(FedAvg(), [torch.zeros(1)], population=12, rows=2 * 3)
    exchange = rule.classes.server_side(DeviceKit(store, 3))
    for r in range(8):
        clients = torch.randperm(12, generator=g)[:4].tolist()
        rows = torch.tensor([1.0, 0.3, 0.0]).repeat(2) + 0.3 * torch.randn(4, 6, generator=g)
        if r == 5:
            rows[0] *= 1e6                                              # out of range: left out, its last rows kept
        store.put_round(r, list(zip(clients, rows)))
        exchange.step(r, 0.1, {})
        seen = store.seen.nonzero().flatten()
        assert exchange.row["mean_cosine"] == pytest.approx(mean_pairwise_cosine(store.rows[seen].reshape(-1, 3)),
                                                            abs=1e-12)
    resumed = rule.classes.server_side(DeviceKit(store, 3))
    store.put_round(8, [])
    resumed.step(8, 0.1, {})
    assert resumed.row["mean_cosine"] == pytest.approx(mean_pairwise_cosine(store.rows[seen].reshape(-1, 3)),
                                                       abs=1e-12)


@pytest.mark.parametrize("name", ["fedaws", "fedaws-all", "fedavg"])
def test_a_client_whose_upload_is_left_out_is_left_out_of_the_class_step(name):
    """As a party in the silo: the rows a client sent in a round whose upload the server's check left out are not
    stored (a first-seen client stays unseen, zeros; a returning one keeps its last good rows) and take no part in
    the round's step: not an anchor, not a negative of another; the other clients' rows are stepped on as if it had
    not been sampled."""
    from types import SimpleNamespace

    import numpy as np

    from fedmpi.algorithms.fedavg import FedAvg
    from fedmpi.algorithms.fedaws import FedAwS, FedAwSOptions
    from fedmpi.algorithms.spreadout import spreadout_step
    from fedmpi.algorithms.spreadout_round import round_spreadout_step
    from fedmpi.crossdevice.class_rows import DeviceKit
    from fedmpi.crossdevice.client_state import client_store

    rule = {"fedavg": FedAvg(), "fedaws": FedAwS(FedAwSOptions(lr_scale=5.0)),
            "fedaws-all": FedAwS(FedAwSOptions(lr_scale=5.0, rows="all"))}[name]
    g = torch.Generator().manual_seed(7)
    d = 3
    close = torch.tensor([1.0, 0.2, 0.0]) + 0.1 * torch.randn(6, d, generator=g)
    store = client_store(FedAvg(), [torch.zeros(1)], population=6, rows=d)
    exchange = SimpleNamespace(clients=np.array([0, 2, 3]))
    classes = rule.classes.server_side(DeviceKit(store, d, exchange))
    store.put_round(0, [(k, close[k]) for k in (0, 2, 3)])
    classes.step(0, 0.1, {}, np.zeros(3, bool))
    before = store.rows.clone()
    exchange.clients = np.array([1, 2, 4])                 # 1: first seen, 2: returning, both left out
    store.put_round(1, [(k, close[k] + 0.5) for k in (4, 1, 2)])     # the states return in rank order
    classes.step(1, 0.1, {}, np.array([True, True, False]))
    seen = [0, 2, 3, 4]
    assert store.seen.nonzero().flatten().tolist() == seen
    assert (store.rows[[1, 5]] == 0).all()
    expected = torch.cat([before[[0, 2, 3]], close[4:5] + 0.5])
    if name == "fedaws":
        round_spreadout_step(expected, torch.tensor([3]), 0.5, 0.4)
    elif name == "fedaws-all":
        spreadout_step(expected, 0.5, 0.4)
    assert torch.equal(store.rows[seen], expected)
    assert classes.row["clients_seen"] == 4
    assert classes.row["mean_cosine"] == pytest.approx(mean_pairwise_cosine(expected), abs=1e-12)


def test_a_face_client_loss_of_about_0_at_the_first_round_is_said_once_with_what_to_change():
    """An untrained start maps every face close to one direction, so each w_c (its owner's normalised feature sum)
    already meets ν_pos: the launch's first round says so in one line; a loss that trains says nothing."""
    from types import SimpleNamespace

    from fedmpi.crossdevice.face_clients import idle_loss_line

    cfg = SimpleNamespace(clients=SimpleNamespace(positive_margin=0.9))
    assert idle_loss_line(cfg, 0, 3.1234e-4) == (
        "clients' loss 3.12e-04 at round 1: the class rows already meet ν_pos = 0.9 under this start (it maps every "
        "face close to one direction), so the clients have almost nothing to learn; start from a model that tells "
        "faces apart (model.init=FILE, README: 'A phone per person') or raise clients.positive_margin")
    assert idle_loss_line(cfg, 0, 0.012) == "" and idle_loss_line(cfg, 4, float("nan")) == ""
