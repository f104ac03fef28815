import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedmpi.errors import Diverged
from fedmpi.fv.search import (FVSearch, MovingNorm, NoFiniteCandidate, candidate_backbone, choose, local_norm,
                              sample_candidates, smooth)
from fedmpi.fv.weighting import FederatedValidation

S = np.array([[0.9, 0.5],
              [0.8, 0.7],
              [0.7, 0.6]])


# ---------------------------------------------------------------- candidates

def test_candidates_first_row_is_w_and_rows_are_on_the_simplex():
    w = np.array([0.5, 0.3, 0.2])
    candidates = sample_candidates(w, 5, np.random.default_rng(0))
    assert candidates.shape == (5, 3)
    assert np.array_equal(candidates[0], w)
    assert np.allclose(candidates.sum(axis=1), 1.0) and (candidates >= 0).all()


def test_candidates_are_uniform_on_the_simplex():
    # Dirichlet(1, 1, 1): each coordinate is Beta(1, 2), mean 1/3, P(x < 0.5) = 0.75
    candidates = sample_candidates(np.full(3, 1 / 3), 20001, np.random.default_rng(1))[1:]
    assert np.allclose(candidates.mean(axis=0), 1 / 3, atol=0.01)
    assert np.allclose((candidates < 0.5).mean(axis=0), 0.75, atol=0.01)


def test_candidates_reject_bad_input():
    with pytest.raises(ValueError, match="sum to 1"):
        sample_candidates([0.5, 0.6], 3, np.random.default_rng(0))
    with pytest.raises(ValueError, match="T .* at least 1"):
        sample_candidates([0.5, 0.5], 0, np.random.default_rng(0))


def test_candidate_backbone_eq7_stacked_and_list_agree():
    thetas = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    w_hat = np.array([0.2, 0.3, 0.5])
    expected = 0.2 * thetas[0] + 0.3 * thetas[1] + 0.5 * thetas[2]
    assert torch.allclose(candidate_backbone(w_hat, thetas), expected)
    as_list = [t.clone() for t in thetas]
    assert torch.allclose(candidate_backbone(w_hat, as_list), expected)
    assert torch.equal(as_list[0], thetas[0])  # inputs untouched
    assert np.allclose(candidate_backbone(w_hat, thetas.numpy()), expected.numpy())
    with pytest.raises(ValueError, match="weighting has 2 entries for 3 party backbones"):
        candidate_backbone([0.5, 0.5], thetas)


# ---------------------------------------------------------------- normalisation

def test_local_norm_eq8_hand_computed():
    # column 0: mean 0.8, population variance 0.02/3; column 1: mean 0.6, variance 0.02/3
    expected = np.array([[0.9, 0.5], [0.8, 0.7], [0.7, 0.6]]) / math.sqrt(0.02 / 3 + 0.001)
    assert np.allclose(local_norm(S, eps=0.001), expected)


def test_moving_norm_starts_from_the_first_iteration_statistics_then_follows_eq9_to_11():
    norm = MovingNorm(gamma=0.5, eps=0.001)
    first = norm(np.array([[1.0], [2.0], [3.0]]))
    assert norm.mu == pytest.approx([2.0]) and norm.nu == pytest.approx([2 / 3])
    assert first == pytest.approx(np.array([[1.0], [2.0], [3.0]]) / math.sqrt(2 / 3 + 0.001))
    second = norm(np.array([[4.0], [4.0], [4.0]]))
    # mu = 0.5*2 + 0.5*4 = 3; nu = 0.5*(2/3) + 0.5*mean((4-3)^2) = 5/6
    assert norm.mu == pytest.approx([3.0]) and norm.nu == pytest.approx([5 / 6])
    assert second == pytest.approx(np.full((3, 1), 4.0 / math.sqrt(5 / 6 + 0.001)))


def test_moving_norm_state_round_trip():
    rng = np.random.default_rng(0)
    norm = MovingNorm(gamma=0.1)
    for _ in range(3):
        norm(rng.random((3, 2)))
    restored = MovingNorm()
    restored.load_state_dict(norm.state_dict())
    scores = rng.random((3, 2))
    assert np.array_equal(restored(scores), norm(scores))
    with pytest.raises(ValueError, match="scores have 3 validators but Moving Norm tracks 2"):
        norm(rng.random((3, 3)))


# ---------------------------------------------------------------- argmax and smoothing

def test_choose_eq12_sums_over_validators_and_breaks_ties_to_the_current_w():
    assert choose(np.array([[1.0, 1.0], [0.5, 2.0], [2.0, 0.1]])) == 1
    assert choose(np.array([[1.0, 2.0], [2.0, 1.0], [0.0, 0.0]])) == 0


def test_smooth_eq13():
    w, w_hat = np.array([0.5, 0.5]), np.array([1.0, 0.0])
    assert smooth(w, w_hat, 0.1) == pytest.approx([0.55, 0.45])
    assert np.array_equal(smooth(w, w_hat, 0.0), w)
    with pytest.raises(ValueError, match="phi"):
        smooth(w, w_hat, 1.5)


# ---------------------------------------------------------------- the search

def prefer_light_last_party(candidates):
    """Two validators that both score a candidate higher the less it weights the last party."""
    return np.stack([1.0 - candidates[:, -1], 0.9 - 0.5 * candidates[:, -1]], axis=1)


@pytest.mark.parametrize("norm", ["local", "moving"])
def test_search_moves_weight_away_from_a_useless_party_and_stays_on_the_simplex(norm):
    search = FVSearch(3, T=3, phi=0.05, norm=norm, seed=0)
    for _ in range(200):
        candidates = search.propose()
        assert np.array_equal(candidates[0], search.w)
        record = search.update(candidates, prefer_light_last_party(candidates))
        assert (record["w"] >= 0).all() and record["w"].sum() == pytest.approx(1.0, abs=1e-12)
    assert search.w[2] < 0.1
    assert search.iteration == 200


def test_record_holds_what_the_log_needs():
    search = FVSearch(2, T=3, phi=0.5, seed=3)
    candidates = search.propose()
    raw = np.array([[0.5, 0.5], [0.9, 0.8], [0.1, 0.2]])
    record = search.update(candidates, raw)
    assert record["chosen"] == 1
    assert np.array_equal(record["raw"], raw)
    assert np.allclose(record["normalized"], local_norm(raw, 0.001))
    assert np.allclose(record["w"], 0.5 * np.array([0.5, 0.5]) + 0.5 * candidates[1])
    assert np.array_equal(record["candidates"], candidates)


def test_phi_zero_leaves_w_unchanged():
    search = FVSearch(4, phi=0.0, seed=1, initial_w=[0.1, 0.2, 0.3, 0.4])
    w0 = search.w.copy()
    rng = np.random.default_rng(0)
    for _ in range(20):
        search.update(search.propose(), rng.random((3, 2)))
    assert np.array_equal(search.w, w0)


@pytest.mark.parametrize("norm", ["local", "moving"])
def test_t_equal_one_never_changes_w(norm):
    search = FVSearch(3, T=1, phi=0.3, norm=norm, seed=2, initial_w=[0.6, 0.3, 0.1])
    w0 = search.w.copy()
    rng = np.random.default_rng(0)
    for _ in range(20):
        record = search.update(search.propose(), rng.random((1, 4)))
        assert record["chosen"] == 0
    assert np.array_equal(search.w, w0)


def test_same_seed_same_search_and_state_round_trip_continues_identically():
    a = FVSearch(3, norm="moving", seed=5)
    b = FVSearch(3, norm="moving", seed=5)
    for _ in range(10):
        ca, cb = a.propose(), b.propose()
        assert np.array_equal(ca, cb)
        assert np.array_equal(a.update(ca, prefer_light_last_party(ca))["w"],
                              b.update(cb, prefer_light_last_party(cb))["w"])
    state = a.state_dict()
    resumed = FVSearch(3, norm="moving", seed=999)
    resumed.load_state_dict(state)
    for _ in range(10):
        ca, cr = a.propose(), resumed.propose()
        assert np.array_equal(ca, cr)
        assert np.array_equal(a.update(ca, prefer_light_last_party(ca))["w"],
                              resumed.update(cr, prefer_light_last_party(cr))["w"])
    assert resumed.iteration == a.iteration == 20


def test_state_dict_survives_torch_save_with_weights_only(tmp_path):
    search = FVSearch(3, norm="moving", seed=5)
    candidates = search.propose()
    search.update(candidates, prefer_light_last_party(candidates))
    torch.save(search.state_dict(), tmp_path / "fv.pt")
    resumed = FVSearch(3, norm="moving")
    resumed.load_state_dict(torch.load(tmp_path / "fv.pt", weights_only=True))
    assert np.array_equal(resumed.propose(), search.propose())


def test_search_rejects_bad_input():
    search = FVSearch(3, seed=0)
    candidates = search.propose()
    with pytest.raises(ValueError, match="candidate 0 is not the current w"):
        search.update(candidates[::-1], np.zeros((3, 2)))
    with pytest.raises(ValueError, match="scores have 2 rows for 3 candidates"):
        search.update(candidates, np.zeros((2, 2)))
    with pytest.raises(ValueError, match="candidates must be \\[3, 3\\]"):
        search.update(candidates[:, :2], np.zeros((3, 2)))
    with pytest.raises(ValueError, match="FV norm must be one of"):
        FVSearch(3, norm="global")
    with pytest.raises(ValueError, match="initial_w has 2 entries for 3 parties"):
        FVSearch(3, initial_w=[0.5, 0.5])
    with pytest.raises(ValueError, match="FV state is for 3 parties"):
        FVSearch(4).load_state_dict(search.state_dict())


def test_a_candidate_whose_scores_are_not_finite_is_ranked_last_and_the_search_moves_away():
    search = FVSearch(3, T=3, phi=0.5, seed=0)
    candidates = search.propose()
    raw = np.array([[np.nan, 0.6], [0.7, 0.8], [0.5, 0.5]])       # the current w's backbone is not finite
    record = search.update(candidates, raw)
    assert np.isneginf(record["normalized"][0]).all()
    np.testing.assert_array_equal(record["normalized"][1:], local_norm(raw[1:]))   # the others among themselves
    assert record["chosen"] == 1 and np.array_equal(search.w, 0.5 * candidates[0] + 0.5 * candidates[1])
    moving = FVSearch(3, T=3, norm="moving", seed=0)
    moving.update(moving.propose(), raw)
    np.testing.assert_array_equal(moving.moving.mu, [0.6, 0.65])      # its statistics follow the finite ones
    candidates = search.propose()
    with pytest.raises(NoFiniteCandidate, match="every one of the 3 FV candidates has a score that is not finite"):
        search.update(candidates, np.full((3, 2), np.inf))


class NotFiniteScores:
    """Validators whose every reply is NaN: every candidate backbone has embeddings that are not finite."""
    val_sets = ["lfw"]

    def post(self, word, flat):
        return SimpleNamespace(done=True, result=lambda: {"lfw": math.nan})


def test_fv_with_no_finite_candidate_stops_the_run_saying_the_global_model_is_not_finite():
    cfg = SimpleNamespace(fv=SimpleNamespace(T=2, phi=0.1, gamma=0.01, eps=1e-3, norm="local"),
                          run=SimpleNamespace(seed=0))
    fv = FederatedValidation(cfg, 2, NotFiniteScores(), log=None, initial_w=np.full(2, 0.5))
    fv.for_round(0, torch.zeros(2, 3))
    fv.start()
    with pytest.raises(Diverged, match=r"^the global model is no longer finite: every one of the 2 FV candidates "
                                       r"has a score that is not finite \(FV iteration 1\)$"):
        fv.complete_if_done(1)


class RecordingValidator:
    """A hosted validator that records which (word, set) it computes, in order."""

    names = ["lfw", "cfp_fp"]

    def __init__(self):
        self.done = []
        self.flat = None

    def load(self, flat):
        self.flat = flat

    def score_set(self, name):
        self.done.append(("score", name, float(self.flat[0])))
        return 0.0

    def evaluate_set(self, name):
        self.done.append(("evaluate", name, float(self.flat[0])))
        return {}


@pytest.mark.parametrize("scores_first", [False, True])
def test_a_hosted_validator_scores_fv_candidates_before_a_queued_evaluation_in_deterministic_fv(scores_first):
    """Deterministic FV (fv.iterations_per_round > 0) blocks the round on its iterations: an evaluation posted
    before them waits, and each set is computed on its own request's backbone either way."""
    from fedmpi.fv.validator_client import HostedEndpoint, Request

    validator = RecordingValidator()
    endpoint = HostedEndpoint(validator, scores_first=scores_first)
    evaluation = Request("evaluate", torch.tensor([1.0]), validator.names)
    candidate = Request("score", torch.tensor([2.0]), validator.names)
    endpoint.post(evaluation)
    endpoint.progress()                        # one evaluation set computed before the FV iteration starts
    endpoint.post(candidate)
    while endpoint.progress():
        pass
    first = [("evaluate", "lfw", 1.0)]
    if scores_first:
        assert validator.done == first + [("score", "lfw", 2.0), ("score", "cfp_fp", 2.0), ("evaluate", "cfp_fp", 1.0)]
    else:
        assert validator.done == first + [("evaluate", "cfp_fp", 1.0), ("score", "lfw", 2.0), ("score", "cfp_fp", 2.0)]
    assert candidate.done and evaluation.done
