"""Secure aggregation under mpirun (fed.secure_aggregation; fedmpi/secagg, silo/secure_exchange.py): for every rule
that composes with it, a SecAgg run follows the plain run of the same config: the first round's losses (trained
before any aggregation) are equal, Θ after round 1 is within the quantisation's bound of the plain Θ, round 2's Θ
and losses stay close, while the server only ever held the masked sum. The log says "masked", and bytes up are
the masked words (4 bytes an entry here, against the float64 plain upload)."""
import h5py
import pytest
import torch

from algorithm_harness import checkpoint_parts, declare_rule

C, BITS = 64.0, 30                     # the run's clipping range covers every update here (BN variances too)
STEP = 2 * C / 2 ** BITS               # Δ; Σ w_i over the 2 parties is 2 (uniform) or 1 + 1/3 (batch: 16 vs 8 images)
RULES = {"fedavg": ["fed.weighting=batch"], "fedavgm": [], "pfm": [], "fedprox": [], "fedadam": [], "fedyogi": [],
         "fedadagrad": [], "scaffold": [], "feddyn": []}
SECURE = ["fed.secure_aggregation.mode=secagg", f"fed.secure_aggregation.clipping_range={C}",
          f"fed.secure_aggregation.quantization_bits={BITS}"]
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
