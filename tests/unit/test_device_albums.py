"""PrivacyFace on personal albums across devices (crossdevice/album_clusters.py, cluster_pool.py, cluster_relay.py):
the device's consensus-aware loss over its own rows and the relayed clusters against a float64 reference written
from spec §3.4, its own clusters left out; its DPLC release as the silo's mechanism with the device's n_min; the
pool's slots and release counts; the relay's payload check; the config's refusals."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedmpi.algorithms.dplc import cluster, generator
from fedmpi.algorithms.privacyface import PrivacyFaceOptions, PrivateClusters
from fedmpi.crossdevice.cluster_pool import ClusterPool
from fedmpi.models.cone_negatives import consensus_aware_loss
from fedmpi.models.heads import make_margin

D64 = torch.float64


def reference_loss(f, rows, labels, cones, s, m):
    """Spec §3.4 by hand, ArcFace ψ(θ) = cos(θ + m) (past θ + m = π its linear continuation cos θ − m sin m,
    models/heads.py): θ_j = arccos(ŵ_j·f̂), φ_q = arccos(p̂_q·f̂),
    L = mean −log e^{sψ(θ_y)} / (e^{sψ(θ_y)} + Σ_{j≠y} e^{s cos θ_j}
                                  + Σ_q e^{s cos(max(φ_q − α_q, 0))})."""
    acos = lambda c: math.acos(min(1.0, max(-1.0, c)))
    total = 0.0
    for i in range(len(labels)):
        fh = f[i] / f[i].norm()
        theta = [acos(float((rows[j] / rows[j].norm()) @ fh)) for j in range(len(rows))]
        y = int(labels[i])
        psi = math.cos(theta[y] + m) if theta[y] + m < math.pi else math.cos(theta[y]) - m * math.sin(m)
        target = s * psi
        others = [s * math.cos(t) for j, t in enumerate(theta) if j != y]
        for q in range(len(cones)):
            p = cones[q, :-2] / cones[q, :-2].norm()
            phi = acos(float(p @ fh))
            others.append(s * math.cos(max(phi - float(cones[q, -2]), 0.0)))
        top = max([target, *others])
        total += -(target - top) + math.log(math.exp(target - top) + sum(math.exp(o - top) for o in others))
    return total / len(labels)


@pytest.mark.parametrize("seed", range(5))
def test_the_consensus_aware_loss_equals_spec_3_4_in_float64(seed):
    g = torch.Generator().manual_seed(seed)
    n, b, d, Q = 3 + seed % 2, 6, 5, 1 + seed % 3
    rows, f = torch.randn(n, d, generator=g, dtype=D64), torch.randn(b, d, generator=g, dtype=D64)
    cones = torch.cat([torch.randn(Q, d, generator=g, dtype=D64), torch.full((Q, 1), 0.6, dtype=D64),
                       torch.ones(Q, 1, dtype=D64)], dim=1)
    f[0] = cones[0, :d] * 2.0                           # a sample inside a cone: its logit saturates at s
    labels = torch.randint(0, n, (b,), generator=g)
    head = make_margin("arcface", 8.0, 0.3)
    got = consensus_aware_loss(f, rows, labels, head, cones)
    assert abs(float(got) - reference_loss(f, rows, labels, cones, 8.0, 0.3)) < 1e-12
    plain = consensus_aware_loss(f, rows, labels, head, None)
    assert abs(float(plain) - reference_loss(f, rows, labels, cones[:0], 8.0, 0.3)) < 1e-12
    assert float(got) > float(plain)                    # each cone is one more negative in the normaliser


def test_the_loss_reaches_the_features_and_the_rows_never_the_cones():
    g = torch.Generator().manual_seed(1)
    rows = torch.randn(4, 6, generator=g, dtype=D64).requires_grad_(True)
    f = torch.randn(5, 6, generator=g, dtype=D64).requires_grad_(True)
    cones = torch.cat([torch.randn(2, 6, generator=g, dtype=D64), torch.full((2, 1), 0.5, dtype=D64),
                       torch.ones(2, 1, dtype=D64)], dim=1).requires_grad_(True)
    labels = torch.tensor([0, 1, 2, 3, 0])
    head = make_margin("cosface", 16.0, 0.2)
    assert torch.autograd.gradcheck(lambda f, rows: consensus_aware_loss(f, rows, labels, head, cones.detach()),
                                    (f, rows))
    consensus_aware_loss(f, rows, labels, head, cones).backward()
    assert cones.grad is None or not cones.grad.any()


def album_head(pool, part, n=3, d=4):
    """An AlbumRows over a stand-in model (the identity on d features) and data of one image per row."""
    from fedmpi.crossdevice.album_clusters import AlbumRows

    data = SimpleNamespace(per_client=n, parts={})
    head = AlbumRows(torch.nn.Identity(), data, d, 4, make_margin("arcface", 8.0, 0.3), part, pool)
    head.round = 7
    return head


def test_a_client_uses_the_other_clients_clusters_never_its_own_and_releases_after_its_steps():
    d, Q = 4, 1
    pool = ClusterPool(1, 3, (Q, d + 2), population=10, device="cpu", dtype=D64)
    g = torch.Generator().manual_seed(3)
    released = torch.cat([torch.randn(3, Q, d, generator=g, dtype=D64), torch.full((3, Q, 1), 0.6, dtype=D64),
                          torch.ones(3, Q, 1, dtype=D64)], dim=2)
    pool.put(0, [2, 5, 9], released)
    options = PrivacyFaceOptions(kappa=0.0, epsilon_select=10.0, epsilon_count=10.0, device_min_count=1.0, seed=4)
    part = PrivateClusters(options)
    head = album_head(pool, part)
    rows = torch.randn(3 * d, generator=g, dtype=D64)
    head.begin(5, rows)                    # client 5: the clusters of clients 2 and 9
    assert torch.equal(head.cones, released[[0, 2], 0])
    x, y = torch.randn(6, d, generator=g, dtype=D64), torch.tensor([0, 1, 2, 0, 1, 2])
    expected = reference_loss(x, rows.view(3, d), y, released[[0, 2], 0], 8.0, 0.3)
    assert abs(float(head.loss(x, y).detach()) - expected) < 1e-12
    out = torch.zeros(3 * d, dtype=D64)
    head.end(out)                          # the rows back into the state, then the device's release
    assert torch.equal(out, rows)
    reference = torch.zeros(Q, d + 2, dtype=D64)
    unit = torch.nn.functional.normalize(rows.view(3, d), dim=1)
    count = cluster(unit, reference, kappa=0.0, budget=options.budget, candidates=options.candidates, min_count=1.0,
                    selection="exponential", rng=generator(4, 5, 7))       # (seed, client, round)
    assert count == 1 and torch.equal(head.released[0], reference)
    head.begin(4, rows)                    # client 4 released nothing: all three are its negatives
    assert head.cones.shape[0] == 3


def test_an_albums_release_needs_the_devices_n_min_not_the_parties():
    """The same album and draws: released with the device's n_min (1), withheld with the parties' 20."""
    rows = torch.nn.functional.normalize(torch.randn(4, 8, generator=torch.Generator().manual_seed(0),
                                                     dtype=D64), dim=1)
    for n_min, expected in ((1.0, 1), (20.0, 0)):
        part = PrivateClusters(PrivacyFaceOptions(kappa=0.0, epsilon_select=10.0, epsilon_count=10.0,
                                                   device_min_count=n_min))
        out = torch.zeros(1, 10, dtype=D64)
        part.summarise(rows, out, 0, 3, {}, device=True)          # client 3, round 0
        assert bool(out[0, -1] == 1) == bool(expected)


def test_the_pool_keeps_the_last_rounds_releases_and_counts_each_clients():
    pool = ClusterPool(2, 2, (1, 5), population=6, device="cpu", dtype=torch.float32)
    one = lambda v: torch.tensor([[[v, 0, 0, 0.6, 1.0]], [[0, v, 0, 0.6, 1.0]]])
    pool.put(0, [1, 4], one(1.0))
    pool.put(1, [2, 4], one(2.0))
    assert pool.owners.tolist() == [1, 4, 2, 4] and pool.valid() == 4
    pool.put(2, [0, 5], one(3.0))               # round 2 replaces round 0's slot
    assert pool.owners.tolist() == [0, 5, 2, 4] and pool.clusters[0, 0] == 3.0
    assert pool.releases.tolist() == [1, 1, 1, 0, 2, 1]
    assert pool.negatives_for(4).shape[0] == 3
    pool.put(3, [3], one(4.0)[:1])              # a smaller cohort: the slot's other row holds nothing
    assert pool.owners.tolist() == [0, 5, 3, -1] and pool.valid() == 3
    restored = ClusterPool(2, 2, (1, 5), population=6, device="cpu", dtype=torch.float32)
    restored.load_state_dict(pool.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(restored.state_dict().values(), pool.state_dict().values()))
    with pytest.raises(ValueError, match="relayed clusters' clusters is \\[2, 5\\], this run keeps \\[4, 5\\]"):
        restored.load_state_dict(ClusterPool(1, 2, (1, 5), 6, "cpu", torch.float32).state_dict())


def test_a_hostile_or_broken_cluster_is_named_and_left_out_of_the_relay(capsys):
    """Clients 3 and 7 send clusters scaled by 10^30 and NaN, client 5 a release too short: named, zeroed (not
    relayed); an honest client's cluster and a client that released nothing are kept as they are."""
    from fedmpi.crossdevice.cluster_relay import ClusterRelay

    d = 3
    exchange = SimpleNamespace(sampler=SimpleNamespace(count=4, population=10), device="cpu",
                               clients=np.array([1, 3, 5, 7]), trainers=[1, 2])
    store = SimpleNamespace(initial=torch.zeros(1), norm_ratio=10.0, pool=None)
    relay = ClusterRelay(PrivateClusters(PrivacyFaceOptions()),
                         SimpleNamespace(store=store, exchange=exchange, d=d, nothing=lambda: None))
    assert store.pool is relay.pool
    relay.order = [1, 3, 5, 7]
    honest = torch.tensor([0.6, 0.8, 0.0, 0.64, 1.0])
    honest_too = torch.tensor([0.0, 0.6, 0.8, 0.64, 1.0])
    relay.received = torch.stack([honest, honest * 1e30, honest_too, torch.full((5,), float("nan"))])[:, None]
    assert relay.left_out(4, None) == 2
    out = capsys.readouterr().out
    assert "round 5: a cluster released by client 3 is out of range (its RMS value" in out
    assert "round 5: a cluster released by client 7 is not finite: left out of the relay" in out
    assert torch.equal(relay.received[0, 0], honest) and torch.equal(relay.received[2, 0], honest_too)
    assert not relay.received[[1, 3]].any()
    # a client whose backbone upload the server's check left out: its cluster is not relayed either
    relay.received[1, 0] = honest
    assert relay.left_out(4, np.array([False, True, False, False])) == 1 and not relay.received[1].any()
    # a release shorter than [Q, d + 2]: the end's mark set before the receive is still there
    from fedmpi.comm.message_end import mark_end

    mark_end(relay.received[2])
    relay.received[2, 0, :3] = honest_too[:3]
    assert relay.left_out(4, None) == 1 and not relay.received[2].any()
    out = capsys.readouterr().out
    assert "round 5: the release of client 5 is wrongly shaped (shorter than the 1 x 5 values the server expects " \
           "of it): left out of the relay" in out and "cluster released by client 5" not in out
    assert torch.equal(relay.received[0, 0], honest)


@pytest.mark.parametrize("overrides, message", [
    (["clients.identities_per_client=1"],
     "clients.identities_per_client: privacyface needs an album (>= 2 identities a client): over one identity its "
     "DP cluster is its owner's face template with noise and its softmax has no negative of its own"),
    (["fed.options.release_every=3"],
     "fed.options.release_every: across devices a client releases its clusters each round it is sampled; leave it "
     "1, got 3"),
    (["fed.options.pool_rounds=0"], "fed.options.pool_rounds: must be > 0, got 0"),
    (["fed.options.device_min_count=-1"], "fed.options.device_min_count: must be >= 0, got -1"),
])
def test_the_album_config_refuses_in_one_line(overrides, message):
    from fedmpi.config import ConfigError, load_config

    with pytest.raises(ConfigError) as caught:
        load_config("configs/faces_albums.yaml", overrides)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_album_config_is_accepted():
    from fedmpi.config import load_config

    cfg = load_config("configs/faces_albums.yaml", [])
    assert cfg.clients.identities_per_client == 4 and cfg.fed.options["pool_rounds"] == 1


def test_the_clients_store_checkpoints_the_pool_and_names_a_checkpoint_without_one():
    from fedmpi.algorithms.fedavg import FedAvg
    from fedmpi.crossdevice.client_state import client_store

    store = client_store(FedAvg(), [torch.zeros(1)], population=4, rows=3)
    before = store.state_dict()                              # a run of another method: no pool
    store.pool = ClusterPool(1, 2, (1, 5), population=4, device="cpu", dtype=torch.float32)
    store.pool.put(0, [1, 3], torch.ones(2, 1, 5))
    saved = store.state_dict()
    other = client_store(FedAvg(), [torch.zeros(1)], population=4, rows=3)
    other.pool = ClusterPool(1, 2, (1, 5), population=4, device="cpu", dtype=torch.float32)
    other.load_state_dict(saved)
    assert other.pool.owners.tolist() == [1, 3] and other.pool.releases.tolist() == [0, 1, 0, 1]
    with pytest.raises(ValueError, match="checkpoint: it keeps no relayed clusters"):
        other.load_state_dict(before)
