"""FedAdam: FedAvg with the adam server optimizer (Reddi et al. 2021); the rule picks it (fed.server.optimizer=auto,
lr 0.01) and refuses another; under mpirun the server's second step is Alg. 2's update of its first."""
import pytest

from algorithm_harness import assert_adaptive_server_step, declare_rule
from fedmpi.core.build import build_rule
from fedmpi.config import ConfigError, load_config


def test_the_rule_is_fedavg_with_the_adam_server_optimizer():
    algorithm = build_rule(load_config(None, ["fed.algorithm=fedadam", "fed.server.beta1=0.5"]))
    server = algorithm.server
    assert (server.kind, server.lr, server.beta1, server.tau) == ("adam", 0.01, 0.5, 1e-3)
    with pytest.raises(ConfigError, match="fed.server.optimizer: fedadam is defined by the adam server optimizer"):
        load_config(None, ["fed.algorithm=fedadam", "fed.server.optimizer=sgd"])


RUN = declare_rule("fedadam", ["fed.algorithm=fedadam", "fed.server.lr=0.05", "fed.server.beta1=0.8",
                               "fed.server.beta2=0.9", "fed.server.tau=0.01"])  # made in the shared launch


def test_under_mpirun_the_server_step_is_reddis_update(shared_runs):
    run = shared_runs[RUN]
    assert_adaptive_server_step(run, "adam", lr=0.05, beta1=0.8, beta2=0.9, tau=0.01)
