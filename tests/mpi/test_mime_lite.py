"""MIME-lite (Karimireddy et al. 2021): with K = 1 every local step is the mimicked momentum SGD step at the
server model, so it follows centralized momentum SGD on the union batch step for step (as PFM does), in the
plain-function driver and under mpirun; with K > 1 the fixed server momentum steers every local step."""
import pytest
import torch

from algorithm_harness import BETA, LRS, WD, batch_weights, centralized, federated, float64  # noqa: F401
from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.algorithms.mime_lite import MimeLite, MimeLiteOptions
from fedmpi.config import ConfigError, load_config
from shared_runs import data_root_of, declare
from test_equivalence_mpi import SMALL, centralized_reference, run_federated


@pytest.mark.usefixtures("float64")
def test_k1_follows_centralized_momentum_sgd():
    w = batch_weights()
    mime = federated(MimeLite(MimeLiteOptions(momentum=BETA), weight_decay=WD), K=1, rounds=8, lrs=LRS, weights=w)
    assert torch.allclose(mime, centralized(rounds=8, lrs=LRS, weights=w), atol=1e-9, rtol=0)


@pytest.mark.usefixtures("float64")
def test_with_several_local_steps_the_server_momentum_steers_them():
    w = batch_weights()
    mime = federated(MimeLite(MimeLiteOptions(momentum=BETA), weight_decay=WD), K=3, rounds=2, lrs=LRS, weights=w)
    without = federated(MimeLite(MimeLiteOptions(momentum=0.0), weight_decay=WD), K=3, rounds=2, lrs=LRS, weights=w)
    fedavg = federated(FedAvg(weight_decay=WD), K=3, rounds=2, lrs=LRS, weights=w)
    assert torch.allclose(without, fedavg, atol=1e-12, rtol=0)   # β = 0: local SGD, then the average
    assert (mime - fedavg).abs().max() > 1e-4


def test_the_server_optimizer_is_its_own():
    with pytest.raises(ConfigError, match="fed.server.optimizer: mime_lite is defined by the sgd server optimizer"):
        load_config(None, ["fed.algorithm=mime_lite", "fed.server.optimizer=momentum"])
    with pytest.raises(ConfigError, match=r"fed.options.momentum: must be in \[0, 1\), got 1.5"):
        load_config(None, ["fed.algorithm=mime_lite", "fed.options.momentum=1.5"])


K1 = ["fed.algorithm=mime_lite", "fed.K=1", "fed.weighting=batch"]
declare("mime_lite-k1", [*SMALL, *K1])  # made in the shared launch


def test_under_mpirun_k1_follows_centralized_momentum_sgd(shared_runs):
    federated_run = run_federated(shared_runs, "mime_lite-k1")
    reference = centralized_reference(data_root_of(shared_runs["mime_lite-k1"]), K1, momentum=0.9)
    assert torch.allclose(federated_run, reference, atol=1e-9, rtol=0), (federated_run - reference).abs().max()
