"""A bad party for robustness studies and what it weighs: `parties.NAME.attack.scale` (the party's leader sends
Θ + scale·(θ_i − Θ) for the trainable values) and `log.influence` (each party's effective weight in the
round's combination, whatever the aggregator).

Exact on known inputs: the attack's arithmetic; the effective weights of a weighted mean are its w, of Krum the
chosen upload, of a median of planted outliers near zero. Under mpirun (one FedAvg round of 2 parties, float64,
the session's shared launch): what the server averages is linear in the scale, so the global models after a
round with b's scale 1, 0 and -1 satisfy Θ(1) + Θ(-1) = 2 Θ(0) in the trainable values, while the BN statistics
go as trained (equal in all three); the logged influence of FedAvg is w. A party that sends an update scaled by
1e300, aggregated with the server's upload check off, leaves a global model whose embeddings are not finite: the
run ends cleanly, its evaluation logged as NaN (a diverged model is a result; tests/mpi/test_upload_check_runs.py
has the check on). Refusals: one line each."""
import math

import numpy as np
import pytest
import torch

from fedmpi.aggregation.influence import effective_weights
from fedmpi.aggregation.krum import Krum
from fedmpi.aggregation.median import Median
from fedmpi.silo.attack import scale_update
from fedmpi.store.h5log import LogReader
from shared_runs import declare
from test_equivalence_mpi import SMALL
from test_robust_aggregation import assert_refused

ONE_ROUND = [*SMALL, "fed.algorithm=fedavg", "fed.K=3", "optim.epochs=1", "optim.steps_per_epoch=3",
             "optim.milestones=[]", "log.influence=true"]
SCALED = {scale: declare(f"attack-b-{scale}", [*ONE_ROUND, f"parties.b.attack.scale={scale}"])
          for scale in (1, 0, -1)}
DIVERGED = declare("attack-b-diverges", [*(o for o in ONE_ROUND if o != "log.influence=true"), "eval.every=1",
                                         "parties.b.attack.scale=1e300", "fed.upload_check.action=off"])


class Rows:
    def __init__(self, rows):
        self.rows = rows


def test_the_attack_sends_the_global_model_plus_the_scaled_update():
    upload = torch.tensor([1.0, 2.0, -3.0, 0.5], dtype=torch.float64)
    theta = torch.tensor([0.5, 2.5, -1.0, 0.5], dtype=torch.float64)
    assert scale_update(upload.clone(), theta, -1.0).tolist() == [0.0, 3.0, 1.0, 0.5]
    assert scale_update(upload.clone(), theta, 4.0).tolist() == [2.5, 0.5, -9.0, 0.5]
    assert scale_update(upload.clone(), theta, 0.0).tolist() == theta.tolist()


def test_effective_weights_of_a_weighted_mean_are_its_weights():
    rows = torch.randn(4, 3000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    w = torch.tensor([0.1, 0.4, 0.3, 0.2], dtype=torch.float64)
    weights, residual = effective_weights(rows, w @ rows)
    np.testing.assert_allclose(weights.numpy(), w.numpy(), atol=1e-12)
    assert residual < 1e-6 and abs(float(weights.sum()) - 1) < 1e-12


def test_effective_weights_of_krum_and_of_the_median_against_a_planted_outlier():
    g = torch.Generator().manual_seed(2)
    honest = 1.0 + 0.1 * torch.randn(1, 5000, generator=g, dtype=torch.float64)
    rows = honest + 0.05 * torch.randn(7, 5000, generator=g, dtype=torch.float64)
    rows[5] = honest[0] - 4 * (rows[5] - honest[0]) + 3.0      # scaled, sign-flipped and shifted
    out = torch.empty(5000, dtype=torch.float64)
    Krum(Krum.Options(f=1))(Rows(rows), None, out)
    chosen = int(Krum(Krum.Options(f=1)).selected(rows)[0])
    weights, residual = effective_weights(rows, out)
    expected = np.zeros(7)
    expected[chosen] = 1.0
    np.testing.assert_allclose(weights.numpy(), expected, atol=1e-9)
    Median()(Rows(rows), None, out)
    weights, _ = effective_weights(rows, out)
    assert abs(weights[5]) < 0.01 and abs(float(weights.sum()) - 1) < 1e-12       # the outlier counts for nothing
    assert (weights[[0, 1, 2, 3, 4, 6]] > 0.1).all()


def test_fedavg_averages_the_scaled_upload_and_logs_w_as_influence(shared_runs):
    final = {s: torch.load(f"{shared_runs[name]}.pt") for s, name in SCALED.items()}
    n = final[1]["n_trainable"]
    honest, free_rider, flipped = (final[s]["theta"] for s in (1, 0, -1))
    assert not torch.equal(honest[:n], free_rider[:n])
    torch.testing.assert_close(honest[:n] + flipped[:n], 2 * free_rider[:n], rtol=0, atol=1e-12)
    assert torch.equal(honest[n:], free_rider[n:]) and torch.equal(honest[n:], flipped[n:])
    for name in SCALED.values():
        with LogReader(shared_runs[name] / "log.h5") as log:
            influence = log.table("influence")
        assert list(influence["round"]) == [0]
        np.testing.assert_allclose(influence["weights"], [[0.5, 0.5]], atol=1e-9)
        assert influence["residual"][0] < 1e-6


def test_a_diverged_global_model_ends_the_run_cleanly_with_its_evaluation_logged_as_nan(shared_runs):
    with LogReader(shared_runs[DIVERGED] / "log.h5") as log:
        rounds, evaluation, sets = log.table("rounds"), log.table("eval"), log.val_sets
    assert list(rounds["round"]) == [0] and np.isfinite(rounds["loss"]).all()    # trained, then diverged
    assert list(evaluation["round"]) == [0] and sets
    assert all(np.isnan(evaluation[f"{name}/accuracy"][0]) for name in sets)
    from fedmpi.analysis.badparty_report import Outcome     # what the study's report shows for such a run
    assert Outcome(shared_runs[DIVERGED] / "log.h5", {"party": "b"}).shown_accuracy == "diverged (round 1)"


@pytest.mark.parametrize("overrides, message", [
    (["parties.ga.attack.scale=.nan"], "parties.ga.attack.scale: must be a finite number, got nan"),
    (["parties.ga.attack.scale=-1", "fed.setting=centralized"],
     "parties.ga.attack.scale: only a party of the federated (or solo) layout uploads"),
    (["parties.ga.attack.scale=oops"], "parties[1].attack.scale: expected a number"),
    (["parties.ga.attack.short_rows=-1"], "parties.ga.attack.short_rows: must be >= 0 (0: the whole payload), got -1"),
    (["log.influence=true", "clients.population=10"], "log.influence: needs every upload"),
])
def test_bad_values_are_refused_in_one_line(overrides, message):
    assert_refused(["fv.enabled=false", *overrides], message)


def test_effective_weights_of_uploads_that_are_not_finite_are_nan():
    """A round the upload check let through (action off or warn) with a NaN upload: no affine mix to measure."""
    rows = torch.ones(3, 10, dtype=torch.float64)
    rows[1, 4] = float("nan")
    weights, residual = effective_weights(rows, torch.ones(10, dtype=torch.float64))
    assert torch.isnan(weights).all() and weights.shape == (3,) and math.isnan(residual)


def test_effective_weights_sum_to_one_when_the_uploads_are_nearly_equal():
    """float32 models a small update apart (the uploads of a round), values far larger than the update: the ones
    direction of the centred Gram matrix is zero only up to rounding, which must not leak into the weights
    (without removing it the weights summed to 0.95 and -1.2 here)."""
    g = torch.Generator().manual_seed(3)
    theta = 30 * torch.randn(20000, generator=g)
    rows = theta + 1e-3 * torch.randn(3, 20000, generator=g)
    w = torch.tensor([0.5, 0.16, 0.34], dtype=torch.float64)
    mixed = (w.float() @ rows)
    for combination in (mixed, mixed + 1e-3 * torch.randn(20000, generator=g)):
        weights, residual = effective_weights(rows, combination)
        assert abs(float(weights.sum()) - 1) < 1e-9
    np.testing.assert_allclose(effective_weights(rows, mixed)[0].numpy(), w.numpy(), atol=2e-3)
    assert effective_weights(rows, mixed)[1] < 1e-2       # float32 rounding of values 30 against a 1e-3 spread
