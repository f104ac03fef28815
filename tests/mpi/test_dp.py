"""Central differential privacy (DP-FedAvg, fedmpi/aggregation/dp.py): clipping and the noise's scale exact on
known updates, adaptive clipping's step (Andrew et al. 2021) replayed from the seeded generator, the accountant
equal to dp-accounting's own composition, and the combinations DP cannot protect refused in one line. The noised
BatchNorm running variances are clamped at 0: under mpirun (the session's shared launch) a round with noise far
above the model's values ends cleanly, the variances it made negative at 0 and its evaluation logged (where NaN
embeddings made the server abort before)."""
import logging
import math
from types import SimpleNamespace

import dp_accounting
import pytest
import torch

from fedmpi.aggregation.accounting import ORDERS, epsilon
from fedmpi.aggregation.aggregators import WeightedMean
from fedmpi.aggregation.dp import GaussianMechanism, update_noise_multiplier
from fedmpi.config.aggregation import DPConfig
from fedmpi.core.state import BackboneState
from fedmpi.store.h5log import LogReader
from shared_runs import declare
from test_equivalence_mpi import SMALL
from test_robust_aggregation import assert_refused

LOUD = declare("dp-loud-noise", [*SMALL, "fed.algorithm=fedavg", "fv.enabled=false", "fed.K=3", "optim.epochs=1",
                                 "optim.steps_per_epoch=3", "optim.milestones=[]", "eval.every=1",
                                 "fed.dp.enabled=true", "fed.dp.clip=1.0", "fed.dp.noise_multiplier=5.0"])

REF = torch.tensor([1.0, 1.0, 1.0, 1.0], dtype=torch.float64)
DELTAS = torch.tensor([[3.0, 4.0, 0.0, 0.0],      # norm 5: clipped to C = 1
                       [0.0, 0.0, 0.5, 0.0],      # norm 0.5: kept
                       [0.0, 0.0, 0.0, -2.0]],    # norm 2: halved
                      dtype=torch.float64)


def gaussian_mean(options, reference: torch.Tensor, count: int, nonnegative=()) -> GaussianMechanism:
    """DP-FedAvg around the weighted mean, measuring the updates from `reference` (as the server step sets it)."""
    dp = GaussianMechanism(WeightedMean(), options, count, nonnegative)
    dp.starts_from(reference)
    return dp


def uploads(rows: torch.Tensor) -> SimpleNamespace:
    """A round's uploads as the exchange gives them: the rows and their weighted mean (one mat-vec)."""
    return SimpleNamespace(rows=rows, weighted_mean=lambda w, out: torch.mv(rows.t(), w.to(rows.dtype), out=out))


def mechanism(**options):
    opts = DPConfig(enabled=True, **{"clip": 1.0, "noise_multiplier": 0.7, "seed": 5, **options})
    ref = REF.clone()
    return gaussian_mean(opts, ref, count=3), ref


def combine(dp, w):
    out = torch.empty(4, dtype=torch.float64)
    dp(uploads(REF + DELTAS), w, out)
    return out


def test_clipped_updates_plus_noise_of_z_C_max_w():
    w = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    dp, _ = mechanism()
    got = combine(dp, w)
    clipped = torch.tensor([[0.6, 0.8, 0, 0], [0, 0, 0.5, 0], [0, 0, 0, -1.0]], dtype=torch.float64)
    noise = torch.randn(4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    expected = REF + w @ clipped + 0.7 * 1.0 * 0.5 * noise
    assert torch.allclose(got, expected, rtol=0, atol=1e-15)
    assert dp.last["noise_std"] == pytest.approx(0.35, rel=0, abs=1e-15)


def test_the_reference_may_be_the_output_itself():
    """A rule whose server step is the average writes the combination straight into Θ, which is also the
    reference the updates are measured from."""
    w = torch.full((3,), 1 / 3, dtype=torch.float64)
    dp, ref = mechanism(seed=1)
    expected = combine(mechanism(seed=1)[0], w)
    dp(uploads(REF + DELTAS), w, ref)
    assert torch.equal(ref, expected)


def test_the_noise_has_the_stated_standard_deviation():
    n = 200_000
    opts = DPConfig(enabled=True, clip=2.0, noise_multiplier=1.5, seed=0)
    ref = torch.zeros(n, dtype=torch.float64)
    dp = gaussian_mean(opts, ref, count=4)
    out = torch.empty(n, dtype=torch.float64)
    dp(uploads(torch.zeros(4, n, dtype=torch.float64)), torch.full((4,), 0.25, dtype=torch.float64), out)
    assert out.std().item() == pytest.approx(1.5 * 2.0 * 0.25, rel=0.01)


def test_the_noise_leaves_the_nonnegative_slices_clamped_at_zero_and_the_rest_as_drawn():
    w = torch.full((3,), 1 / 3, dtype=torch.float64)
    plain = combine(mechanism(noise_multiplier=30.0)[0], w)
    dp = gaussian_mean(DPConfig(enabled=True, clip=1.0, noise_multiplier=30.0, seed=5), REF.clone(), count=3,
                       nonnegative=(slice(1, 3),))
    clamped = combine(dp, w)
    assert (plain[1:3] < 0).any()                      # the noise (std 10) does make a variance negative here
    assert torch.equal(clamped[1:3], plain[1:3].clamp(min=0))
    assert torch.equal(clamped[[0, 3]], plain[[0, 3]])


def test_the_state_knows_where_the_batchnorm_running_variances_lie():
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Conv2d(4, 2, 1),
                              torch.nn.BatchNorm1d(2))
    with torch.no_grad():
        for i, bn in ((1, net[1]), (3, net[3])):
            bn.running_var.copy_(torch.arange(bn.num_features) + 10.0 * i)
    state = BackboneState(net)
    flat = state.read()
    assert [flat[s].tolist() for s in state.variances] == [[10.0, 11.0, 12.0, 13.0], [30.0, 31.0]]


def test_a_round_of_loud_noise_ends_cleanly_with_the_variances_clamped_and_its_evaluation_logged(shared_runs):
    """Noise of std >= 2.5 on values of ~1: the variances it made negative are 0 in the final model, and the
    evaluation of that model is logged (finite, or NaN where the noised weights overflow float32 embeddings: the
    server no longer aborts on it)."""
    from fedmpi.config import load_config
    from fedmpi.models.backbone import build_backbone

    final = torch.load(f"{shared_runs[LOUD]}.pt")
    with LogReader(shared_runs[LOUD] / "log.h5") as log:
        rounds, evaluation, noise = log.table("rounds")["round"], log.table("eval"), log.table("privacy")["noise_std"]
    assert len(noise) == 1 and noise[0] >= 5.0 * 1.0 / 2      # z C max w: noise well above a variance of ~1
    assert list(rounds) == [0] and list(evaluation["round"]) == [0]
    cfg = load_config(None, [*SMALL, "fv.enabled=false", "fed.K=3"])
    variances = torch.cat([final["theta"][part] for part in BackboneState(build_backbone(
        cfg, torch.device("cpu"), torch.float64)).variances])
    assert (variances >= 0).all() and (variances == 0).sum() > len(variances) // 10


def test_adaptive_clipping_moves_C_by_the_noisy_unclipped_fraction():
    w = torch.full((3,), 1 / 3, dtype=torch.float64)
    dp, _ = mechanism(adaptive=True, count_noise=0.6, noise_multiplier=1.0, clip_lr=0.2, target_quantile=0.5)
    z = update_noise_multiplier(1.0, 0.6)
    assert z == pytest.approx((1 - (1.2) ** -2) ** -0.5)
    combine(dp, w)
    g = torch.Generator().manual_seed(5)
    torch.randn(4, generator=g, dtype=torch.float64)                         # the update's noise
    unclipped = (1 + 0.6 * float(torch.randn((), generator=g, dtype=torch.float64))) / 3   # only ‖Δ_2‖ <= 1
    assert dp.last["unclipped"] == pytest.approx(unclipped, abs=1e-15)
    assert dp.clip == pytest.approx(math.exp(-0.2 * (unclipped - 0.5)), abs=1e-15)
    assert dp.last["noise_std"] == pytest.approx(z / 3, abs=1e-15)


def test_the_state_resumes_the_same_noise():
    w = torch.full((3,), 1 / 3, dtype=torch.float64)
    whole, _ = mechanism(adaptive=True, count_noise=0.6)
    resumed, _ = mechanism(adaptive=True, count_noise=0.6, seed=99)
    combine(whole, w)
    resumed.load_state_dict(whole.state_dict())
    assert torch.equal(combine(whole, w), combine(resumed, w)) and resumed.clip == whole.clip


@pytest.mark.parametrize("rounds, z, q", [(1, 1.0, 1.0), (50, 1.1, 1.0), (20, 0.8, 0.05)])
def test_epsilon_is_the_librarys_composition(rounds, z, q):
    accountant = dp_accounting.rdp.RdpAccountant(ORDERS)
    event = dp_accounting.GaussianDpEvent(z)
    if q < 1:
        event = dp_accounting.PoissonSampledDpEvent(q, event)
    for _ in range(rounds):
        accountant.compose(event)
    assert epsilon(rounds, z, 1e-5, q) == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-12)


def test_subsampled_rounds_are_accounted_without_a_warning_per_order(caplog):
    """Orders near 1 do not converge at q = 0.25; the library leaves them out with a warning each, which a
    cross-device run printed 7 times a round (140 lines in 20 rounds)."""
    with caplog.at_level(logging.DEBUG):
        assert epsilon(20, 1.0, 1e-5, 0.25) == pytest.approx(9.099, abs=1e-3)
        logging.getLogger("absl").warning("kept")
    assert [r.getMessage() for r in caplog.records] == ["kept"]


def test_epsilon_of_one_gaussian_round_is_below_the_classic_rdp_bound():
    """One Gaussian mechanism: RDP α/(2z²); the classic conversion min_α α/(2z²) + log(1/δ)/(α−1) bounds the
    library's (tighter) conversion from above, and it is not far below."""
    z, delta = 2.0, 1e-5
    classic = min(a / (2 * z * z) + math.log(1 / delta) / (a - 1) for a in ORDERS)
    assert 0.8 * classic < epsilon(1, z, delta) <= classic
    assert epsilon(0, z, delta) == 0.0 and epsilon(3, 0.0, delta) == float("inf")


@pytest.mark.parametrize("overrides, message", [
    (["fv.enabled=true"], "fed.dp.enabled: Federated Validation scores every party's unclipped, un-noised "
                          "theta_i on the validators, which is what DP protects: set fv.enabled=false"),
    (["fv.enabled=false", "fed.algorithm=scaffold"], "fed.dp.enabled: scaffold uploads "),
    (["fv.enabled=false", "fed.aggregation.rule=median"], "fed.dp.enabled: fed.aggregation.rule=median: "),
    (["fv.enabled=false", "fed.dp.clip=0"], "fed.dp.clip: must be > 0, got 0.0"),
    (["fv.enabled=false", "fed.dp.adaptive=true"],
     "fed.dp.count_noise: adaptive clipping needs count_noise > noise_multiplier / 2 (Andrew et al. 2021): "
     "0.15 <= 0.5"),
])
def test_what_dp_cannot_protect_is_refused_in_one_line(overrides, message):
    assert_refused(["fed.dp.enabled=true", *overrides], message)
