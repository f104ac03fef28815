"""The server's upload check (fedmpi/aggregation/upload_check.py), one process, exact numbers: each upload's update
norm ‖θ_i − Θ‖ against the median of the others' (fed.upload_check.norm_ratio); an upload out of range is
excluded through the server's own step (ServerStep) with its weight 0 and the others' renormalised, or, for a rule
that reads every upload, left out of the rule; DP's mechanism keeps its weights and clips the outlier itself;
warn, stop, every upload out of range, and a global model or loss that is no longer finite each end as the
module says, in one line naming the round and the uploads."""
import io
import math

import numpy as np
import pytest
import torch

from algorithm_harness import GatheredUploads, float64  # noqa: F401
from fedmpi.aggregation import upload_check
from fedmpi.aggregation.aggregators import WeightedMean
from fedmpi.aggregation.median import Median
from fedmpi.aggregation.server_step import ServerStep
from fedmpi.aggregation.upload_check import UploadCheck, judge, rounds_text, update_norms
from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.core.payloads import Payloads
from fedmpi.core.state import BackboneState
from fedmpi.errors import EXIT_DIVERGED, Diverged

pytestmark = pytest.mark.usefixtures("float64")

# Θ = 0; update norms 3, 5 and 500: c is 125 x the median of the others' (4)
ROWS = torch.tensor([[1.0, 2.0, 2.0, 0.0],
                     [0.0, 3.0, 4.0, 0.0],
                     [300.0, 400.0, 0.0, 0.0]])
W = torch.tensor([0.25, 0.25, 0.5], dtype=torch.float64)
C_OUT = "round 1: upload of c out of range: ‖θ_c − Θ‖ = 500, 125 x the median of the others' (4); "


def server(action="exclude", aggregator=None):
    """The server's step of FedAvg with the check, over a model of 3 trainable values and 1 buffer, Θ = 0."""
    model = torch.nn.Linear(3, 1, bias=False)
    model.register_buffer("running", torch.zeros(1))
    state = BackboneState(model)
    cpu, dtype = torch.device("cpu"), torch.float64
    rule = FedAvg()
    down, mean = Payloads(state, rule.down, cpu, dtype), Payloads(state, rule.up, cpu, dtype)
    down.flat.zero_()
    said = io.StringIO()
    check = UploadCheck(action, 10.0, down.theta, stream=said)
    step = ServerStep(rule, aggregator or WeightedMean(), down, mean, rule.init_server_state(down.trainable, down.extra),
                      state.n_trainable, check)
    uploads = GatheredUploads(3, mean.flat.numel())
    uploads.rows.copy_(ROWS)
    return step, uploads, down, check, said


def test_update_norms_and_the_ratio_rule_on_known_inputs(monkeypatch):
    reference = torch.tensor([1.0, 0.0, 0.0, 0.0])
    assert update_norms(ROWS, reference).tolist() == [math.sqrt(8), math.sqrt(26), math.sqrt(299 ** 2 + 400 ** 2)]
    monkeypatch.setattr(upload_check, "BLOCK", 3)          # blocks of columns add up to the same norms
    assert update_norms(ROWS, torch.zeros(4)).tolist() == [3.0, 5.0, 500.0]
    ratios, out = judge(np.array([3.0, 5.0, 500.0]), 10.0)
    np.testing.assert_allclose(ratios, [3 / 252.5, 5 / 251.5, 125.0], rtol=1e-15)
    assert out.tolist() == [False, False, True]
    assert judge(np.array([3.0, 3e6]), 10.0)[1].tolist() == [False, True]       # two parties: the other is the median
    # a non-finite upload is out of range and is left out of the others' median
    assert judge(np.array([1.0, np.nan, 1000.0]), 10.0)[1].tolist() == [False, True, True]
    assert judge(np.array([0.0, 0.0, 5.0]), 10.0)[1].tolist() == [False, False, False]   # median 0: no ratio
    assert judge(np.array([7.0]), 10.0)[1].tolist() == [False]                   # one upload: nothing to compare
    assert rounds_text([0, 1, 2, 5]) == "rounds 1-3, 6" and rounds_text([4]) == "round 5"


def test_an_excluded_upload_weighs_nothing_and_the_others_are_renormalised():
    step, uploads, down, check, said = server()
    step(uploads, W)
    assert down.theta.tolist() == [0.5, 2.5, 3.0, 0.0]                  # (a + b) / 2: w 0.25, 0.25 -> 0.5, 0.5
    assert uploads.rows[2].tolist() == [0.0, 0.0, 0.0, 0.0]              # c's row is now Θ, a zero update
    assert said.getvalue() == C_OUT + "excluded from the round (its weight 0, the others' renormalised)\n"
    columns = check.log_columns(3)
    assert columns["update_norm"].tolist() == [3.0, 5.0, 500.0] and columns["uploads_excluded"].tolist() == [0, 0, 1]
    assert check.log_columns(1)["update_norm"].tolist() == [500.0]      # one log row for many uploads: the largest
    assert check.log_columns(1)["uploads_excluded"].tolist() == [1]


def test_a_rule_over_every_upload_runs_over_the_others():
    step, uploads, down, _, _ = server(aggregator=Median())
    step(uploads, W)
    assert down.theta.tolist() == [0.5, 2.5, 3.0, 0.0]                  # the median of a and b, not of a, b, c


def test_dp_keeps_every_weight_clips_the_outlier_itself_and_counts_a_nan_as_a_zero_update():
    check = UploadCheck("exclude", 10.0, torch.zeros(4), stream=io.StringIO())
    uploads = GatheredUploads(3, 4)
    uploads.rows.copy_(ROWS)
    same, w = check(uploads, W, clips_uploads=True, needs_uploads=True)
    assert same is uploads and w is W and torch.equal(uploads.rows, ROWS)      # no ratio rule under DP's clip
    uploads.rows[1, 2] = float("nan")
    same, w = check(uploads, W, clips_uploads=True, needs_uploads=True)
    assert same is uploads and w is W and uploads.rows[1].tolist() == [0.0] * 4   # b: a zero update at its weight
    assert check.last.excluded.tolist() == [False, True, False]


def test_warn_aggregates_it_and_a_divergence_names_it_with_its_round():
    step, uploads, down, check, said = server("warn")
    with check.naming_round(0):
        step(uploads, W)
    assert down.theta.tolist() == [150.25, 201.25, 1.5, 0.0]
    assert said.getvalue() == C_OUT + "aggregated as it is (fed.upload_check.action=warn)\n"
    down.flat[1] = float("inf")
    with pytest.raises(Diverged) as stopped:
        check.after_round(1, down.flat, [1.0, 2.0, 3.0], ["a", "b", "c"])
    assert stopped.value.code == ("round 2: the global model is no longer finite after the aggregation; out-of-range "
                                  "uploads aggregated: c in round 1 (‖θ_c − Θ‖ = 500, 125 x the median of the "
                                  "others' (4))")
    assert stopped.value.status == EXIT_DIVERGED


def test_stop_ends_the_run_naming_upload_round_and_norms_and_leaves_the_global_model():
    step, uploads, down, check, _ = server("stop")
    with pytest.raises(Diverged) as stopped, check.naming_round(0):
        step(uploads, W)
    assert stopped.value.code == C_OUT.rstrip("; ") + "; stopped (fed.upload_check.action=stop)"
    assert down.theta.tolist() == [0.0] * 4


def test_a_nan_loss_or_every_upload_out_of_range_stops_the_run_in_one_line():
    step, uploads, down, check, _ = server()
    with check.naming_round(2):
        step(uploads, W)
    with pytest.raises(Diverged) as stopped:
        check.after_round(2, down.flat, [1.0, float("nan"), 2.0], ["a", "b", "c"])
    assert stopped.value.code == ("round 3: the training loss is not finite (b nan); no out-of-range upload was "
                                  "aggregated (update norms in round 3: a 3, b 5, c 500)")
    uploads.rows.fill_(float("nan"))
    with pytest.raises(Diverged) as stopped, check.naming_round(3):
        step(uploads, W)
    assert stopped.value.code.startswith("round 4: upload of a out of range: ‖θ_a − Θ‖ = nan (not finite); upload of b")
    assert stopped.value.code.endswith("; no upload is left to aggregate; no out-of-range upload was aggregated "
                                      "(update norms in round 4: a nan, b nan, c nan)")
