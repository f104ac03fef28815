"""The robust aggregators (fedmpi/aggregation: median, trimmed_mean, krum, multikrum, bulyan) against plain
numpy re-implementations of their papers' definitions, on random uploads with planted outliers and on uploads
full of ties; the layouts they cannot serve are refused by the config with one line naming the numbers."""
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.stats
import torch

from fedmpi.aggregation import columns
from fedmpi.aggregation.bulyan import Bulyan, BulyanOptions
from fedmpi.aggregation.krum import Krum, KrumOptions, MultiKrum, MultiKrumOptions, krum_scores
from fedmpi.aggregation.median import Median
from fedmpi.aggregation.trimmed_mean import TrimmedMean, TrimmedMeanOptions
from fedmpi.config import ConfigError, load_config


# ---------------------------------------------------------------- plain references (numpy, loops)

def krum_scores_ref(x, f):
    n = len(x)
    scores = []
    for i in range(n):
        d = sorted(float(np.sum((x[i] - x[j]) ** 2)) for j in range(n) if j != i)
        scores.append(sum(d[:n - f - 2]))
    return np.array(scores)


def krum_ref(x, f):
    return x[int(np.argsort(krum_scores_ref(x, f), kind="stable")[0])]


def multikrum_ref(x, w, f, m):
    keep = np.argsort(krum_scores_ref(x, f), kind="stable")[:m]
    return np.sum(x[keep] * (w[keep] / w[keep].sum())[:, None], axis=0)


def bulyan_ref(x, f):
    n = len(x)
    theta, beta = n - 2 * f, n - 4 * f
    left, chosen = list(range(n)), []
    while len(chosen) < theta:
        sub = x[left]
        pick = left[int(np.argsort(krum_scores_ref(sub, f), kind="stable")[0])]
        chosen.append(pick)
        left.remove(pick)
    s = x[sorted(chosen)]
    med = np.median(s, axis=0)
    out = np.empty(x.shape[1])
    for c in range(x.shape[1]):
        nearest = np.argsort(np.abs(s[:, c] - med[c]), kind="stable")[:beta]
        out[c] = s[nearest, c].mean()
    return out


def uploads_with_outliers(n, bad, D=40, seed=0):
    """n uploads near a common model, the first `bad` of them far away (scaled, sign-flipped)."""
    g = np.random.default_rng(seed)
    x = 1.0 + 0.1 * g.standard_normal((n, D))
    x[:bad] = -50.0 * x[:bad]
    return x


def uploads_with_ties(n, D=40, seed=1):
    """Values from {-1, 0, 1, 2} and two identical uploads: ties in every coordinate and in Krum's distances."""
    g = np.random.default_rng(seed)
    x = g.integers(-1, 3, size=(n, D)).astype(np.float64)
    x[1] = x[0]
    return x


def run(aggregator, x, w=None):
    rows = torch.from_numpy(x)
    w = torch.full((len(x),), 1.0 / len(x), dtype=torch.float64) if w is None else torch.from_numpy(w)
    out = torch.full((x.shape[1],), float("nan"), dtype=torch.float64)
    aggregator(SimpleNamespace(rows=rows), w, out)
    return out.numpy()


CASES = [uploads_with_outliers(7, 1), uploads_with_outliers(12, 2, seed=3), uploads_with_ties(7),
         uploads_with_ties(12, seed=4)]


@pytest.fixture(params=[None, 7], ids=["one block", "blocks of 7 columns"])
def block(request, monkeypatch):
    """Every rule also over column blocks smaller than the uploads (as IR-18 is split on the server)."""
    if request.param:
        monkeypatch.setattr(columns, "BLOCK", request.param)      # Krum's Gram matrix is summed by columns too


@pytest.mark.parametrize("x", CASES)
def test_median_is_numpys(x, block):
    np.testing.assert_array_equal(run(Median(), x), np.median(x, axis=0))


@pytest.mark.parametrize("x", CASES)
@pytest.mark.parametrize("beta", [0.0, 0.1, 0.2, 0.49])
def test_trimmed_mean_is_scipys(x, beta, block):
    np.testing.assert_allclose(run(TrimmedMean(TrimmedMeanOptions(beta)), x),
                               scipy.stats.trim_mean(x, beta, axis=0), rtol=0, atol=1e-12)


@pytest.mark.parametrize("x", CASES)
def test_krum_picks_the_upload_of_lowest_score(x, block):
    np.testing.assert_array_equal(run(Krum(KrumOptions(f=2)), x), krum_ref(x, 2))


@pytest.mark.parametrize("x", CASES)
@pytest.mark.parametrize("m", [0, 2])
def test_multikrum_averages_the_m_best_with_their_weights(x, m, block):
    w = np.arange(1.0, len(x) + 1) / np.arange(1.0, len(x) + 1).sum()
    got = run(MultiKrum(MultiKrumOptions(f=2, m=m)), x, w)
    np.testing.assert_allclose(got, multikrum_ref(x, w, 2, m or len(x) - 2), rtol=0, atol=1e-12)


def test_distances_are_exactly_symmetric_so_a_mutually_nearest_pair_ties(monkeypatch):
    """Seen on an AVX-512 machine: the blocked Gram matrix came out 1 ulp asymmetric, the pair nearest to each other
    got two different Krum scores, and Bulyan selected other uploads than the paper's (its test failed)."""
    from fedmpi.aggregation.krum import squared_distances

    monkeypatch.setattr(columns, "BLOCK", 7)
    rows = torch.from_numpy(uploads_with_outliers(7, 1))          # asymmetric there without the fix
    d = squared_distances(rows)
    assert torch.equal(d, d.t())
    pair = krum_scores(d, f=7 - 3)                  # n − f − 2 = 1: each score is its nearest distance
    nearest = d.fill_diagonal_(float("inf")).argmin(dim=1)
    mutual = [i for i in range(7) if nearest[nearest[i]] == i]
    assert mutual and all(pair[i] == pair[nearest[i]] for i in mutual)


@pytest.mark.parametrize("x", [uploads_with_outliers(7, 1), uploads_with_outliers(11, 2, seed=5),
                               uploads_with_ties(7), uploads_with_ties(11, seed=6)])
def test_bulyan_is_the_papers(x, block):
    f = (len(x) - 3) // 4
    np.testing.assert_allclose(run(Bulyan(BulyanOptions(f)), x), bulyan_ref(x, f), rtol=0, atol=1e-12)


@pytest.mark.parametrize("aggregator", [Median(), TrimmedMean(TrimmedMeanOptions(0.2)), Krum(KrumOptions(2)),
                                        MultiKrum(MultiKrumOptions(2)), Bulyan(BulyanOptions(2))],
                         ids=lambda a: a.name)
def test_the_planted_outliers_do_not_move_the_aggregate(aggregator):
    """Two of 11 uploads scaled by -50: the weighted mean lands near -9, every robust rule stays near 1."""
    x = uploads_with_outliers(11, 2, seed=7)
    assert np.abs(x.mean(axis=0) - 1).max() > 5
    assert np.abs(run(aggregator, x) - 1).max() < 0.2


def test_krum_distances_survive_nearly_equal_float32_models():
    """Models that differ by 1e-4 around a large common value: the distances come out right in float32 uploads
    (centred Gram matrix in float64), so Krum picks the one in the middle."""
    base = torch.full((3000,), 1000.0)
    rows = torch.stack([base + 1e-4 * k for k in (0, 1, 2, 3, 10)]).float()
    out = torch.empty(3000)
    Krum(KrumOptions(f=1))(SimpleNamespace(rows=rows), torch.full((5,), 0.2, dtype=torch.float64), out)
    assert torch.equal(out, rows[1]) or torch.equal(out, rows[2])


@pytest.mark.parametrize("overrides, message", [
    (["fed.aggregation.rule=krum", "fed.aggregation.f=1"],
     "fed.aggregation.f: krum needs n > 2f + 2 uploads: n = 3, f = 1 (at most f = 0 with 3 uploads)"),
    (["fed.aggregation.rule=multikrum", "fed.aggregation.f=1"],
     "fed.aggregation.f: multikrum needs n > 2f + 2 uploads: n = 3, f = 1 (at most f = 0 with 3 uploads)"),
    (["fed.aggregation.rule=bulyan", "fed.aggregation.f=1"],
     "fed.aggregation.f: bulyan needs n >= 4f + 3 uploads: n = 3, f = 1 (at most f = 0 with 3 uploads)"),
    (["fed.aggregation.rule=trimmed_mean", "fed.aggregation.beta=0.5"],
     "fed.aggregation.beta: must be in [0, 0.5), got 0.5"),
    (["fed.aggregation.rule=mode"],
     "fed.aggregation.rule: 'mode' is not one of mean, median, trimmed_mean, krum, multikrum, bulyan"),
    (["fed.aggregation.rule=median", "fed.aggregation.f=1"], "fed.aggregation.f: unknown key"),
    (["fed.aggregation.rule=median", "fv.enabled=true"],
     "fed.aggregation.rule: median with Federated Validation: FV's weights and median would each decide how "
     "much a party counts; set fv.enabled=false"),
])
def test_a_layout_a_rule_cannot_serve_is_refused_in_one_line(overrides, message):
    assert_refused(["fv.enabled=false", *overrides], message)


def assert_refused(overrides, message, config=None):
    """The config (the default one, or the file `config`) refuses the overrides with one line that starts with
    `message`."""
    with pytest.raises(ConfigError) as e:
        load_config(config, overrides=overrides)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_the_resolved_rule_and_its_defaults_go_to_the_config():
    cfg = load_config(overrides=["fv.enabled=false", "fed.aggregation.rule=trimmed_mean"])
    assert cfg.fed.aggregation == {"rule": "trimmed_mean", "beta": 0.1}
    assert load_config().fed.aggregation == {"rule": "mean"}
