"""FedDyn (Acar et al. 2021, Alg. 1): the local step and the server step by hand; the server's h stays the
w-weighted mean of the parties' λ_k (the paper's (1/m) Σ_k λ_k with uniform w), in the plain-function driver and
under mpirun; α and the server lr checked by the config."""
import pytest
import torch

from algorithm_harness import LRS, WD, checkpoint_parts, declare_rule, federated, float64, recording  # noqa: F401
from fedmpi.algorithms import LocalRound
from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.algorithms.feddyn import FedDyn, FedDynOptions


Recording = recording(FedDyn)


@pytest.mark.usefixtures("float64")
def test_the_local_step_and_the_linear_term_by_hand():
    rule = FedDyn(FedDynOptions(alpha=0.5), weight_decay=0.1)
    theta, anchor, g = torch.tensor([1.0, -2.0]), torch.tensor([0.0, 1.0]), torch.tensor([0.2, 0.4])
    state = {"linear": [torch.tensor([0.3, -0.1])]}
    params = [theta.clone()]
    rnd = LocalRound(lr=0.5, K=4, global_params=[anchor])
    rule.local_step(params, [g.clone()], rnd, state)
    stepped = theta - 0.5 * (g + 0.1 * theta - torch.tensor([0.3, -0.1]) + 0.5 * (theta - anchor))
    assert torch.allclose(params[0], stepped, atol=1e-15, rtol=0)
    rule.end_round(params, rnd, state)                  # λ_k ← λ_k − α (θ_k − Θ)
    assert torch.allclose(state["linear"][0], torch.tensor([0.3, -0.1]) - 0.5 * (stepped - anchor), atol=1e-15)


@pytest.mark.usefixtures("float64")
def test_the_server_step_by_hand():
    rule = FedDyn(FedDynOptions(alpha=0.25))
    theta, mean = torch.tensor([1.0, 2.0]), torch.tensor([0.5, 3.0])
    state = rule.init_server_state(theta)
    state["h"].copy_(torch.tensor([0.1, -0.2]))
    rule.server_update(theta, {"theta": mean}, state, participation=0.5)
    h = torch.tensor([0.1, -0.2]) - 0.25 * 0.5 * (mean - torch.tensor([1.0, 2.0]))
    assert torch.allclose(state["h"], h, atol=1e-15, rtol=0)
    assert torch.allclose(theta, mean - h / 0.25, atol=1e-15, rtol=0)


@pytest.mark.usefixtures("float64")
def test_h_is_the_weighted_mean_of_the_parties_linear_terms_and_changes_the_run():
    w = [0.5, 0.3, 0.2]
    rule = Recording(options=FedDynOptions(alpha=0.1), weight_decay=WD)
    theta = federated(rule, K=3, rounds=4, lrs=LRS, weights=w)
    h = rule.servers[0]["h"]
    parties = [torch.cat([t.reshape(-1) for t in s["linear"]]) for s in rule.trainers]
    assert h.abs().max() > 1e-4
    assert torch.allclose(h, sum(wi * p for wi, p in zip(w, parties)), atol=1e-12, rtol=0)
    fedavg = federated(FedAvg(weight_decay=WD), K=3, rounds=4, lrs=LRS, weights=w)
    assert (theta - fedavg).abs().max() > 1e-4


def test_alpha_and_the_server_lr_are_checked():
    from fedmpi.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"fed.options.alpha: must be > 0, got 0"):
        load_config(None, ["fed.algorithm=feddyn", "fed.options.alpha=0"])
    with pytest.raises(ConfigError, match=r"fed.server.lr: FedDyn's server step has no learning rate"):
        load_config(None, ["fed.algorithm=feddyn", "fed.server.lr=0.5"])
    with pytest.raises(ConfigError, match=r"fed.server.optimizer: feddyn is defined by the sgd server optimizer"):
        load_config(None, ["fed.algorithm=feddyn", "fed.server.optimizer=adam"])
    cfg = load_config(None, ["fed.algorithm=feddyn"])
    assert cfg.fed.options == {"alpha": 0.01} and cfg.fed.local_momentum == 0.0


RUN = declare_rule("feddyn", ["fed.algorithm=feddyn", "fed.options.alpha=0.1"])  # made in the shared launch


def test_under_mpirun_h_is_the_mean_of_the_parties_linear_terms(shared_runs):
    parts = checkpoint_parts(shared_runs[RUN], 2)
    h = parts["server.h5"]["algorithm"]["h"]
    party = [torch.cat([t.reshape(-1) for t in parts[f"party-{p}-0.h5"]["algorithm"]["linear"]]) for p in "ab"]
    assert h.abs().max() > 1e-6
    assert torch.allclose(h, 0.5 * party[0] + 0.5 * party[1], atol=1e-12, rtol=0)
    assert "algorithm" not in parts["party-a-1.h5"]   # the party's λ_k is written once, by its leader
