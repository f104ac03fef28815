"""FedProx (Li et al. 2020): μ = 0 is FedAvg exactly; the proximal gradient μ(θ − Θ) by hand; with K = 1 the
term vanishes (θ = Θ at the only step), so FedProx follows centralized SGD under mpirun for any μ."""
import pytest
import torch

from algorithm_harness import LRS, WD, federated, float64  # noqa: F401
from fedmpi.algorithms import LocalRound
from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.algorithms.fedprox import FedProx, FedProxOptions
from shared_runs import data_root_of, declare
from test_equivalence_mpi import SMALL, centralized_reference, run_federated


@pytest.mark.usefixtures("float64")
def test_mu_0_is_fedavg_exactly():
    w = [0.5, 0.3, 0.2]
    prox = federated(FedProx(FedProxOptions(mu=0.0), local_momentum=0.9, weight_decay=WD), K=3, rounds=3,
                     lrs=LRS, weights=w)
    fedavg = federated(FedAvg(local_momentum=0.9, weight_decay=WD), K=3, rounds=3, lrs=LRS, weights=w)
    assert torch.equal(prox, fedavg)
    moved = federated(FedProx(FedProxOptions(mu=0.5), local_momentum=0.9, weight_decay=WD), K=3, rounds=3,
                      lrs=LRS, weights=w)
    assert (moved - fedavg).abs().max() > 1e-6   # μ > 0 changes the run


@pytest.mark.usefixtures("float64")
def test_the_proximal_gradient_by_hand():
    prox = FedProx(FedProxOptions(mu=0.5), weight_decay=0.1)
    theta, anchor, g = torch.tensor([1.0, -2.0]), torch.tensor([0.0, 1.0]), torch.tensor([0.2, 0.4])
    params = [theta.clone()]
    prox.local_step(params, [g.clone()], LocalRound(lr=0.5, K=4, global_params=[anchor]), {})
    expected = theta - 0.5 * (g + 0.1 * theta + 0.5 * (theta - anchor))
    assert torch.allclose(params[0], expected, atol=1e-15, rtol=0)


def test_mu_is_checked():
    from fedmpi.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"fed.options.mu: must be >= 0, got -1"):
        load_config(None, ["fed.algorithm=fedprox", "fed.options.mu=-1"])
    assert load_config(None, ["fed.algorithm=fedprox"]).fed.options == {"mu": 0.01}


K1 = ["fed.algorithm=fedprox", "fed.options.mu=0.5", "fed.K=1", "fed.weighting=batch", "fed.local_momentum=0",
      "optim.momentum=0"]
declare("fedprox-k1", [*SMALL, *K1])  # made in the shared launch


def test_under_mpirun_k1_follows_centralized_sgd_for_any_mu(shared_runs):
    federated_run = run_federated(shared_runs, "fedprox-k1")
    reference = centralized_reference(data_root_of(shared_runs["fedprox-k1"]), K1, momentum=0.0)
    assert torch.allclose(federated_run, reference, atol=1e-9, rtol=0), (federated_run - reference).abs().max()
