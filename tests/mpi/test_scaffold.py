"""SCAFFOLD (Karimireddy et al. 2020, option II): with one party it is SGD (the correction c − c_i is zero
from the second round on, and c = c_i = 0 in the first); the server's control variate is the w-weighted mean of
the parties' (with uniform w, the paper's mean), in the plain-function driver and under mpirun."""
import pytest
import torch

from algorithm_harness import LRS, checkpoint_parts, declare_rule, federated, float64, recording  # noqa: F401
from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.algorithms.scaffold import Scaffold


Recording = recording(Scaffold)


@pytest.mark.usefixtures("float64")
def test_with_one_party_it_is_sgd():
    scaffold = federated(Scaffold(weight_decay=5e-4), K=3, rounds=4, lrs=LRS, weights=[1.0], parties=1)
    sgd = federated(FedAvg(weight_decay=5e-4), K=3, rounds=4, lrs=LRS, weights=[1.0], parties=1)
    assert torch.allclose(scaffold, sgd, atol=1e-12, rtol=0)


@pytest.mark.usefixtures("float64")
def test_the_server_control_variate_is_the_mean_of_the_parties_and_corrects_the_drift():
    w = [1 / 3] * 3
    rule = Recording(weight_decay=5e-4)
    theta = federated(rule, K=3, rounds=4, lrs=LRS, weights=w)
    c = rule.servers[0]["control"]
    parties = [torch.cat([t.reshape(-1) for t in s["control"]]) for s in rule.trainers]
    assert c.abs().max() > 1e-3
    assert torch.allclose(c, sum(parties) / 3, atol=1e-12, rtol=0)
    fedavg = federated(FedAvg(weight_decay=5e-4), K=3, rounds=4, lrs=LRS, weights=w)
    assert (theta - fedavg).abs().max() > 1e-4   # the correction changes the run


RUN = declare_rule("scaffold", ["fed.algorithm=scaffold"])  # made in the shared launch


def test_under_mpirun_the_server_control_variate_is_the_mean_of_the_parties(shared_runs):
    run = shared_runs[RUN]
    parts = checkpoint_parts(run, 2)
    c = parts["server.h5"]["algorithm"]["control"]
    party = [torch.cat([t.reshape(-1) for t in parts[f"party-{p}-0.h5"]["algorithm"]["control"]]) for p in "ab"]
    assert c.abs().max() > 1e-6
    assert torch.allclose(c, 0.5 * party[0] + 0.5 * party[1], atol=1e-12, rtol=0)
    assert "algorithm" not in parts["party-a-1.h5"]   # the party's c_i is written once, by its leader
