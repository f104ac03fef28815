"""The oracle checks of the face-recognition baselines (docs/BASELINES.md; the values of the specification's §5.2,
computed there with numpy), each through the code's own server function, in float64: FedGC's correction (G1-G5),
FedAwS's spreadout (S1-S5), PrivacyFace's DPLC, cone logits and accounting (P1-P5); the rules' server steps
through their hooks; what each rule lets leave a party; the config's refusals."""
import math

import numpy as np
import pytest
import torch

from algorithm_harness import batch_weights, federated, float64  # noqa: F401
from fedmpi.algorithms.class_steps import bounds_of, unit_rows
from fedmpi.algorithms.dplc import Budget, chord_radius, cluster, exponential_pick, gaussian_sigma, generator, release
from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.algorithms.fedaws import FedAwS, FedAwSOptions
from fedmpi.algorithms.fedgc import FedGC, FedGCOptions
from fedmpi.algorithms.gradient_correction import correction, correction_step
from fedmpi.algorithms.pfm import PFM
from fedmpi.algorithms.registry import method
from fedmpi.algorithms.server_optim import ServerOptimizer
from fedmpi.algorithms.privacyface import PrivacyFace, PrivacyFaceOptions
from fedmpi.algorithms.spreadout import spreadout, spreadout_gradient, spreadout_step
from fedmpi.models.cone_negatives import cone_logits, valid_cones

pytestmark = pytest.mark.usefixtures("float64")
T = lambda *rows: torch.tensor(rows, dtype=torch.float64)   # noqa: E731


def random_rows(C=12, d=8, seed=0):
    return torch.randn(C, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 0.7


# ---------------------------------------------------------------- FedGC (spec §1.5)

def test_g1_two_orthogonal_rows_rotate_apart():
    W = T([1.0, 0.0], [0.0, 1.0])
    reg, grad = correction(W, bounds_of([1, 1]), scale=1.0)
    assert reg == pytest.approx(2 * math.log(1 + math.exp(-1)), abs=1e-12) == pytest.approx(0.6265234, abs=1e-7)
    q = 1 / (1 + math.e)
    assert torch.allclose(grad, T([0.0, q], [q, 0.0]), atol=1e-12)
    assert q == pytest.approx(0.2689414, abs=1e-7)
    correction_step(W, bounds_of([1, 1]), lr=0.5, scale=1.0)
    assert torch.allclose(W, T([1.0, -0.1344707], [-0.1344707, 1.0]), atol=1e-7)


def test_g2_one_party_is_left_alone_and_an_anchor_ignores_its_own_party():
    W = random_rows(6, 4)
    before = W.clone()
    assert correction_step(W, bounds_of([6]), lr=1.0, scale=8.0) == 0.0
    assert torch.equal(W, before)
    # anchor 0 of party [0, 3): its summand does not change when a row of its own party moves
    unit, _ = unit_rows(random_rows(6, 4, seed=1))

    def anchor_term(u):
        a = u[0]
        return math.log(1 + float(torch.exp(8.0 * (u[3:] @ a - 1)).sum()))

    moved = unit.clone()
    moved[1] = torch.nn.functional.normalize(moved[1] + 0.5, dim=0)
    assert anchor_term(moved) == anchor_term(unit)
    assert correction(moved, bounds_of([3, 3]), 8.0)[0] != correction(unit, bounds_of([3, 3]), 8.0)[0]


def test_g3_scale_64_is_negligible_unless_rows_nearly_overlap():
    W = T([1.0, 0.0], [math.cos(0.5), math.sin(0.5)])
    reg, grad = correction(W, bounds_of([1, 1]), scale=64.0)
    assert reg == pytest.approx(7.9135e-4, rel=1e-4)
    assert torch.allclose(grad[0], T(0.0222189, 0.0121382), atol=1e-7)
    assert torch.allclose(grad[1], T(0.0253183, 0.0), atol=1e-7)


def test_g4_gradient_against_finite_differences_and_blocks():
    unit, _ = unit_rows(random_rows())
    bounds, s = bounds_of([5, 4, 3]), 3.0
    reg, grad = correction(unit, bounds, s)

    def frozen(u):   # Reg with the anchors fixed at `unit`, every row free as a negative
        total = 0.0
        for k, (a, b) in enumerate(bounds):
            others = torch.cat([u[:a], u[b:]])
            total += float(torch.log1p(torch.exp(s * (unit[a:b] @ others.T - 1)).sum(dim=1)).sum())
        return total

    h, numeric = 1e-6, torch.zeros_like(unit)
    for i in range(unit.shape[0]):
        for j in range(unit.shape[1]):
            plus, minus = unit.clone(), unit.clone()
            plus[i, j] += h
            minus[i, j] -= h
            numeric[i, j] = (frozen(plus) - frozen(minus)) / (2 * h)
    assert reg == pytest.approx(frozen(unit), abs=1e-12)
    assert float((grad - numeric).abs().max() / grad.abs().max()) < 1e-7
    for block in (1, 2, 5):
        blocked_reg, blocked = correction(unit, bounds, s, block=block)
        assert blocked_reg == pytest.approx(reg, rel=1e-12)
        assert float((blocked - grad).abs().max()) < 1e-12


def test_g5_the_backbones_are_averaged_as_fedavg_and_pfm_average_them():
    w = batch_weights()                              # Σ N_k θ_k / Σ N_k
    assert torch.equal(federated(FedGC(weight_decay=5e-4), 2, 2, [0.1] * 2, w),
                       federated(FedAvg(weight_decay=5e-4), 2, 2, [0.1] * 2, w))
    over_pfm = FedGCOptions(backbone="pfm")
    assert torch.equal(federated(method("fedgc", over_pfm)(over_pfm, weight_decay=5e-4), 2, 2, [0.1] * 2, w),
                       federated(PFM(weight_decay=5e-4), 2, 2, [0.1] * 2, w))


@pytest.mark.parametrize("backbone, own", [("fedavgm", {}), ("scaffold", {}), ("fedadam", {}), ("fedprox", {"mu": 0.3}),
                                           ("feddyn", {"alpha": 0.05})])
def test_any_backbone_rule_trains_and_aggregates_a_class_method_as_it_does_alone(backbone, own):
    """FedGC over another registered rule: its backbone's hooks (SCAFFOLD's control variates, FedAvgM's and
    FedAdam's server steps, FedProx's μ and FedDyn's α, given in FedGC's options) give the backbones exactly what
    the rule alone gives them; the rule is born FedGC."""
    from fedmpi.algorithms.registry import rule

    w, declared = batch_weights(), rule(backbone)
    options = method("fedgc", {"backbone": backbone}).Options(backbone=backbone, **own)
    server = lambda: ServerOptimizer.build(declared.server_optimizer, 1.0 if backbone == "fedavgm" else 0.01)
    composed = method("fedgc", options)(options, weight_decay=5e-4, server=server())
    assert (composed.name, type(composed.classes).__name__) == ("fedgc", "CrossClientCorrection")
    alone = declared(declared.Options(**own), weight_decay=5e-4, server=server())
    assert torch.equal(federated(composed, 2, 2, [0.1] * 2, w), federated(alone, 2, 2, [0.1] * 2, w))


def test_fedgc_rule_steps_with_lambda_eta_and_the_heads_scale():
    W = T([1.0, 0.0], [0.0, 1.0])
    rule = FedGC(FedGCOptions(lr_scale=2.0), head_scale=1.0)
    row = rule.classes.step(W, bounds_of([1, 1]), 0.25, 0, {})
    assert row == {"reg": pytest.approx(0.6265234, abs=1e-7)}
    assert torch.allclose(W, T([1.0, -0.1344707], [-0.1344707, 1.0]), atol=1e-7)   # λη = 0.5, as G1


# ---------------------------------------------------------------- FedAwS (spec §2.4)

S1_ROWS = ([1.0, 0.0], [math.cos(math.pi / 6), math.sin(math.pi / 6)])


def test_s1_two_rows_closer_than_tau():
    unit = T(*S1_ROWS)
    loss, grad = spreadout(unit, tau=0.4)
    assert loss == pytest.approx((0.8660254 - 0.4) ** 2, abs=1e-7) == pytest.approx(0.2171797, abs=1e-7)
    assert torch.allclose(grad[0], T(0.8071797, 0.4660254), atol=1e-7)
    assert torch.allclose(spreadout_gradient(unit, 0.4)[1][0], T(0.0, 0.4660254), atol=1e-7)   # projected
    W = unit.clone()
    spreadout_step(W, lr=0.1, tau=0.4)
    assert torch.allclose(W[0], T(1.0, -0.0466025), atol=1e-7)


def test_s2_rows_apart_are_not_moved():
    W = T([1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.3, 0.0, 1.0])
    before = W.clone()
    assert spreadout_step(W, lr=1.0, tau=0.4) == 0.0
    spreadout_step(W, lr=1.0, tau=0.4, steps=20, momentum=0.9)
    assert torch.equal(W, before)


@pytest.mark.parametrize("cos, value", [(0.5, 0.04), (0.9, 1.0), (0.2, 0.0)])
def test_s3_the_squared_euclidean_form_is_four_times_the_cosine_form(cos, value):
    nu = 1.2
    rows = T([1.0, 0.0], [cos, math.sqrt(1 - cos * cos)])
    euclidean = max(0.0, nu - float(((rows[0] - rows[1]) ** 2).sum())) ** 2
    loss, _ = spreadout(rows, tau=1 - nu / 2)     # the mean over the 2 ordered pairs is the pair's r²
    assert euclidean == pytest.approx(value, abs=1e-12) == pytest.approx(4 * loss, abs=1e-12)


def test_s4_top_k_keeps_the_nearest_rows_only():
    unit = T(*S1_ROWS)
    assert spreadout(unit, 0.4, top_k=1)[0] == spreadout(unit, 0.4)[0]
    assert torch.allclose(spreadout(unit, 0.4, top_k=1)[1], spreadout(unit, 0.4)[1], atol=1e-15)
    third = T(*S1_ROWS, [math.cos(1.2), math.sin(1.2)])       # nearest: 0 -> 1, 1 -> 0, 2 -> 1
    loss, grad = spreadout(third, 0.4, top_k=1)
    r01 = 0.8660254037844387 - 0.4
    r21 = math.cos(1.2 - math.pi / 6) - 0.4
    assert loss == pytest.approx((2 * r01 ** 2 + r21 ** 2) / 3, abs=1e-12)
    # row 0: its own pair (0, 1) and row 1's pair (1, 0); row 2 is nobody's nearest but its own pair (2, 1)
    assert torch.allclose(grad[0], (2 / 3) * 2 * r01 * third[1], atol=1e-12)
    assert torch.allclose(grad[2], (2 / 3) * r21 * third[1], atol=1e-12)
    blocked = spreadout(random_rows(9, 4), 0.1, top_k=3, block=2)
    assert torch.allclose(blocked[1], spreadout(random_rows(9, 4), 0.1, top_k=3)[1], atol=1e-14)


def test_the_spreadout_gradient_is_the_losss_own():
    W = random_rows(7, 5).requires_grad_(True)
    unit = torch.nn.functional.normalize(W, dim=1)
    cos = unit @ unit.T
    off = ~torch.eye(7, dtype=torch.bool)
    loss = ((cos[off] - 0.1).clamp_min(0) ** 2).mean()
    loss.backward()
    value, grad = spreadout_gradient(W.detach(), 0.1, block=3)
    assert value == pytest.approx(float(loss.detach()), abs=1e-14)
    assert float((grad - W.grad).abs().max()) < 1e-13


def test_s5_fedfr_mode_is_twenty_sgd_momentum_steps_with_a_fresh_optimizer():
    W = random_rows(10, 6, seed=3)
    reference = W.clone().requires_grad_(True)
    rule, eta = FedAwS(FedAwSOptions(mode="fedfr")), 0.05
    for r in range(2):   # each round a fresh optimizer: the rule keeps no state between rounds
        optimizer = torch.optim.SGD([reference], lr=10 * eta, momentum=0.9, weight_decay=5e-4)
        for _ in range(20):
            reference.grad = spreadout_gradient(reference.detach(), 0.4)[1]
            optimizer.step()
        rule.classes.step(W, bounds_of([4, 6]), eta, r, {})
        assert torch.equal(W, reference.detach())


# ---------------------------------------------------------------- PrivacyFace (spec §3)

def test_p1_the_gaussian_sigma():
    assert chord_radius(0.8) == pytest.approx(0.6324555, abs=1e-7)
    assert gaussian_sigma(0.8, 0.5, 1e-5) == pytest.approx(12.2564956, abs=1e-7)
    with pytest.raises(ValueError, match="needs 0 < epsilon < 1"):
        gaussian_sigma(0.8, 1.0, 1e-5)


def test_p2_a_release_with_the_noise_given():
    rows = T([1, 0, 0], [0.96, 0.28, 0], [0.96, -0.28, 0], [0, 1, 0])
    centre, members = release(rows, T(1, 0, 0), 0.9, 3.4, T(0.01, -0.02, 0.03))
    assert members.tolist() == [True, True, True, False]
    assert torch.allclose(centre, T(0.9999414, -0.0060057, 0.0090085), atol=1e-7)


def test_p3_the_exponential_mechanism_picks_by_its_inverse_cdf():
    counts, epsilon = torch.tensor([3, 7, 5, 0]), 0.6
    weights = np.exp(epsilon * counts.numpy() / 2)
    cdf = np.cumsum(weights) / weights.sum()
    for u in np.linspace(0, 0.999, 37):
        expected = int(np.searchsorted(cdf, u, side="right"))
        assert exponential_pick(counts, epsilon, float(u)) == expected
        assert exponential_pick(counts + 1000, epsilon, float(u)) == expected     # shifted counts: same pick


def test_p4_the_cone_logit():
    f = T([1.0, 0.0])
    cones = T([math.cos(0.3), math.sin(0.3), 0.5, 1.0], [math.cos(1.0), math.sin(1.0), 0.5, 1.0],
              [0.0, 1.0, 0.5, 0.0])
    kept = valid_cones(cones)
    assert kept.shape[0] == 2                                      # the last row holds no cluster
    assert torch.allclose(cone_logits(f, kept, 64.0), T([64.0, 56.1652840]), atol=1e-6)


def test_p5_releases_compose_by_basic_composition_through_the_relay():
    options = PrivacyFaceOptions(clusters=3, epsilon_select=0.1, epsilon_count=0.2, epsilon_sum=0.5, delta=1e-6)
    rule, state = PrivacyFace(options), {"releases": torch.zeros((), dtype=torch.int64)}
    uploads = torch.zeros(3, 3, 10)
    uploads[:, :, -1] = torch.tensor([[1, 0, 1], [0, 0, 0], [1, 1, 1]])
    uploads[:, :, 0] = torch.arange(9.0).reshape(3, 3)
    replies = torch.zeros(3, 6, 10)
    for r in range(4):
        row = rule.classes.relay(uploads, replies, r, state)
    assert row["releases"] == 4 and row["released"] == 5
    assert row["epsilon"] == pytest.approx(4 * 3 * 0.8) and row["delta"] == pytest.approx(4 * 3 * 1e-6)
    assert row["epsilon_release"] == pytest.approx(2.4)
    assert replies[1, :, 0].tolist() == [0, 1, 2, 6, 7, 8]       # party 1 gets parties 0 and 2, not its own
    assert "epsilon 9.6 at delta 1.2e-05 (4 releases" in rule.classes.summary(state)
    assert Budget(3, 0.1, 0.2, 0.5, 1e-6).spent(4) == (pytest.approx(9.6), pytest.approx(1.2e-5))


def test_dplc_draws_from_seed_party_and_release_and_removes_members():
    W = torch.nn.functional.normalize(random_rows(60, 3, seed=4), dim=1)
    budget = Budget(2, 0.5, 0.5, 0.9, 1e-5)
    a, b = torch.zeros(2, 5), torch.zeros(2, 5)
    kw = dict(kappa=0.5, budget=budget, candidates=64, min_count=3.0, selection="exponential")
    assert cluster(W, a, rng=generator(0, 1, 2), **kw) == cluster(W, b, rng=generator(0, 1, 2), **kw)
    assert torch.equal(a, b) and a[:, -1].sum() > 0
    cluster(W, b, rng=generator(0, 2, 2), **kw)
    assert not torch.equal(a, b)
    assert torch.allclose(a[a[:, -1] > 0, 3], torch.tensor(math.acos(0.5)))
    assert cluster(W, a, rng=generator(0, 1, 2), **{**kw, "min_count": 1e9}) == 0 and not a.any()


# ---------------------------------------------------------------- what leaves a party; the refusals

def test_what_leaves_each_party():
    assert FedAvg().leaves_party == "backbone"
    assert FedGC().leaves_party == "backbone, class embeddings" == FedAwS().leaves_party
    assert PrivacyFace().leaves_party == "backbone, differentially private clusters of the class embeddings"
    from fedmpi.algorithms.scaffold import Scaffold
    assert Scaffold().leaves_party == "backbone, control_delta"
    from fedmpi.algorithms.fedfr import FedFR
    assert FedFR().leaves_party == "backbone, its aggregation weight"      # the combined set's size, beside θ_i


@pytest.mark.parametrize("overrides, message", [
    (["fed.algorithm=fedgc", "fed.dp.enabled=true"],
     "fed.dp.enabled: fedgc uploads every party's class embeddings W_k, which DP-FedAvg neither clips nor noises"),
    (["fed.algorithm=fedaws", "fed.dp.enabled=true"], "fed.dp.enabled: fedaws uploads every party's class embeddings"),
    (["fed.algorithm=fedgc", "clients.population=10"],
     "fed.algorithm: fedgc moves class embeddings, which clients of clients.dataset=synthetic do not keep: use "
     "clients.dataset=faces"),
    (["fed.algorithm=privacyface", "clients.population=10", "clients.dataset=faces"],
     "clients.identities_per_client: privacyface needs an album (>= 2 identities a client)"),
    (["fed.algorithm=privacyface", "fed.options.epsilon_sum=1.0"],
     "fed.options.epsilon_sum: the classical Gaussian mechanism needs 0 < epsilon_sum < 1, got 1.0"),
    (["fed.algorithm=fedaws", "fed.options.mode=many"], "fed.options.mode: 'many' is not one of paper, fedfr"),
    (["fed.algorithm=fedgc", "fed.options.backbone=pfm", "fed.local_momentum=0.9"],
     "fed.local_momentum: fedgc with fed.options.backbone=pfm steps the backbone with PFM's global momentum"),
    (["fed.algorithm=fedaws", "fed.options.mu=0.1"],
     "fed.options.mu: unknown key (known: backbone, block_rows, class_momentum, lr_scale, mode, rows, tau, top_k)"),
    (["fed.algorithm=fedaws", "fed.options.backbone=fedprox", "fed.options.mu=-1"], "fed.options.mu: must be >= 0"),
    (["fed.algorithm=fedgc", "fed.options.backbone=mime_lite", "fed.local_momentum=0.5"],
     "fed.local_momentum: fedgc with fed.options.backbone=mime_lite steps the backbone with MIME-lite's server "
     "momentum (fed.options.momentum)"),
    (["fed.algorithm=privacyface", "fed.options.backbone=fedgc"],
     "fed.options.backbone: fedgc is a method with parts of its own (a class part or a local training), which "
     "privacyface's would replace; a backbone is one of fedavg, "),
    (["fed.algorithm=fedgc", "fed.options.backbone=sgd"],
     "fed.options.backbone: 'sgd' is not a registered rule; a backbone is one of fedavg, fedavgm, pfm, fedprox, "
     "scaffold, fedadam, fedyogi, fedadagrad, mime_lite, feddyn"),
    (["fed.algorithm=fedgc", "fed.options.class_momentum=drop"],
     "fed.options.class_momentum: 'drop' is not one of keep, reset"),
])
def test_the_config_refuses_in_one_line(overrides, message):
    from fedmpi.config import ConfigError, load_config

    with pytest.raises(ConfigError) as caught:
        load_config(None, overrides)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_privacyface_with_dp_fedavg_is_accepted():
    from fedmpi.config import load_config

    cfg = load_config(None, ["fed.algorithm=privacyface", "fed.dp.enabled=true"])
    assert cfg.fed.options["clusters"] == 1 and cfg.fed.local_momentum == 0.0


# ---------------------------------------------------------------- a party the server's upload check leaves out


def server_classes(rule, rows, d):
    """The server's side of the class payloads for one-rank parties, filled by hand (no transport)."""
    from fedmpi.layout import Party
    from fedmpi.silo.server_classes import ServerKit

    parties = [Party(k, f"p{k}", (k + 1,), ()) for k in range(len(rows))]
    return rule.classes.server_side(ServerKit(parties, rows, d, None, "cpu", torch.float64))


def test_a_left_out_partys_rows_are_neither_corrected_nor_a_negative_of_the_others():
    """FedGC with party 1 excluded by the upload check (or sending rows that are not finite): the other two are
    corrected as if party 1 were not in the federation, and party 1 gets its own rows back unchanged."""
    W = random_rows(C=9, d=4, seed=5)
    rule = FedGC(FedGCOptions(lr_scale=2.0), head_scale=4.0)
    server = server_classes(rule, [3, 3, 3], 4)
    server.W.copy_(W)
    server.W[3:6] = W[3:6] * 1e6
    alone = torch.cat([W[0:3], W[6:9]]).clone()
    rule.classes.step(alone, bounds_of([3, 3]), 0.5, 0, {})
    server.step_rows(~server.left_out(np.array([False, True, False])), 0.5, 0, {})
    assert torch.equal(server.W[0:3], alone[0:3]) and torch.equal(server.W[6:9], alone[3:6])
    assert torch.equal(server.W[3:6], W[3:6] * 1e6)
    server.W[4, 1] = float("nan")
    assert server.left_out(None).tolist() == [False, True, False]


def test_a_left_out_partys_clusters_are_not_relayed():
    rule = PrivacyFace(PrivacyFaceOptions(clusters=1))
    server = server_classes(rule, [5, 5, 5], 3)
    server.summaries.copy_(torch.tensor([[[1.0, 0, 0, 0.6, 1]], [[0, 1.0, 0, 0.6, 1]], [[0, 0, 1.0, 0.6, 1]]]))
    server.answer(0, 0.1, {"releases": torch.zeros((), dtype=torch.int64)}, excluded=np.array([False, False, True]))
    assert valid_cones(server.replied[0]).tolist() == [[0, 1.0, 0, 0.6, 1]]   # party 2's cluster held back
    assert valid_cones(server.replied[2]).shape == (2, 5)                     # it still hears the others
    assert server.row["released"] == 2
