"""Secure aggregation under mpirun (fed.secure_aggregation; fedmpi/secagg, core/secure_exchange.py): for every rule
that composes with it, a SecAgg run follows the plain run of the same config: the first round's losses (trained
before any aggregation) are equal, Θ after round 1 is within the quantisation's bound of the plain Θ, round 2's Θ
and losses stay close, while the server only ever held the masked sum. The log says "masked", and bytes up are
the masked words (4 bytes an entry here, against the float64 plain upload)."""
import h5py
import pytest
import torch

from fedmpi.aggregation.accounting import epsilon

from algorithm_harness import checkpoint_parts, declare_rule

C, BITS = 64.0, 30                     # the run's clipping range covers every update here (BN variances too)
STEP = 2 * C / 2 ** BITS               # Δ; Σ w_i over the 2 parties is 2 (uniform) or 1 + 1/3 (batch: 16 vs 8 images)
RULES = {"fedavg": ["fed.weighting=batch"], "fedavgm": [], "pfm": [], "fedprox": [], "fedadam": [], "fedyogi": [],
         "fedadagrad": [], "scaffold": [], "feddyn": []}
SECURE = ["fed.secure_aggregation.mode=secagg", f"fed.secure_aggregation.clipping_range={C}",
          f"fed.secure_aggregation.quantization_bits={BITS}"]
# distributed DP: each party clips at C and adds N(0, (z C)² / P); the mean then carries N(0, (z C / P)²), DP-FedAvg's
Z, CLIP = 1e-5, 1000.0
UNIFORM = declare_rule("plain-fedavg-uniform", ["fed.algorithm=fedavg", "fv.enabled=false"])
DISTRIBUTED_DP = declare_rule("secagg-dp-fedavg", ["fed.algorithm=fedavg", "fv.enabled=false", *[
    "fed.secure_aggregation.mode=secagg", f"fed.secure_aggregation.clipping_range={C}",
    f"fed.secure_aggregation.quantization_bits={BITS}", "fed.dp.enabled=true", f"fed.dp.noise_multiplier={Z}",
    f"fed.dp.clip={CLIP}"]])
RUNS = {rule: (declare_rule(f"plain-{rule}", [f"fed.algorithm={rule}", "fv.enabled=false", *extra]),
               declare_rule(f"secagg-{rule}", [f"fed.algorithm={rule}", "fv.enabled=false", *extra, *SECURE]))
        for rule, extra in RULES.items()}
# Round 1 aggregates uploads trained identically in both runs: each entry of the mean is within P Δ / Σ w of the
# plain one (one rounding step per party), times the server step's gain (FedAvgM's 1 + β, FedDyn's: below 2 here).
ROUND_ONE = 2 * 2 * STEP / (1 + 1 / 3)


def losses(run):
    with h5py.File(run / "log.h5") as f:
        return torch.as_tensor(f["rounds"]["loss"][:])


@pytest.mark.parametrize("rule", RULES)
def test_a_secagg_run_follows_the_plain_run(shared_runs, rule):
    plain, secure = (shared_runs[name] for name in RUNS[rule])
    (a1, b1), (a2, b2) = [[checkpoint_parts(run, r)["server.h5"]["theta"] for run in (plain, secure)] for r in (1, 2)]
    gap = (a1 - b1).abs().max().item()
    assert 0 < gap <= ROUND_ONE, f"round 1: Θ {gap:.3g} from the plain run's, bound {ROUND_ONE:.3g}"
    # round 2's local steps start from Θs that differ by that much, and carry it on (measured: ≤ 1e-4 relative)
    assert (a2 - b2).norm() <= 1e-3 * a2.norm()
    first, second = losses(plain), losses(secure)
    assert torch.equal(first[0], second[0])              # trained from the same Θ_0
    assert torch.allclose(first[1], second[1], rtol=0, atol=1e-4)


def test_the_log_says_masked_and_counts_the_masked_words(shared_runs):
    plain, secure = (shared_runs[name] for name in RUNS["fedavg"])
    with h5py.File(plain / "log.h5") as p, h5py.File(secure / "log.h5") as s:
        assert s.attrs["leaves_party"] == ("backbone, masked (secagg: the server sees only the parties' weighted "
                                           "sum, their weights summed beside it)")
        words = (p["rounds"]["bytes_up"][0] // 8) // 2 + 1        # 2 parties' float64 uploads; + the weight word
        assert s["rounds"]["bytes_up"][0] == 2 * 4 * words


def test_distributed_dp_the_sum_carries_dp_fedavgs_noise_and_its_epsilon(shared_runs):
    """The parties' updates lie within C here, so round 1's Θ is the plain run's plus the parties' summed noise
    shares over P = 2: N(0, (z C / 2)²) per entry (measured over its 179,392 entries), and the privacy table
    reports that noise and the accountant's ε of DP-FedAvg with the same z."""
    plain, noised = shared_runs[UNIFORM], shared_runs[DISTRIBUTED_DP]
    a, b = (checkpoint_parts(run, 1)["server.h5"]["theta"] for run in (plain, noised))
    noise = b - a
    assert abs(noise.std().item() / (Z * CLIP / 2) - 1) < 0.02 and abs(noise.mean().item()) < 1e-4
    with h5py.File(noised / "log.h5") as f:
        privacy = {k: f["privacy"][k][:] for k in ("noise_std", "epsilon")}
    assert privacy["noise_std"].tolist() == pytest.approx([Z * CLIP / 2] * 2)
    assert privacy["epsilon"].tolist() == pytest.approx([epsilon(r, Z, 1e-5, 1.0) for r in (1, 2)])
