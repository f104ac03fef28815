"""The launch's memory check of a cross-device run (fedmpi/memory/check.py, judge_client_states): the server keeps
each sampled client's state (SCAFFOLD's c_i: the CNN's 1,756,426 values, 6.7 MB in float32) for the whole run, so
SCAFFOLD at M = 10,000 clients is refused in one line with the population or the rounds that fit."""
from fedmpi.config import load_config
from fedmpi.memory.check import judge_client_states

GB = 1024 ** 3
M10K = ["clients.population=10000", "clients.train_images=50000", "clients.images=5", "clients.fraction=0.001"]


def check(*overrides, available=20 * GB):
    return judge_client_states(load_config("configs/hsu_cifar10.yaml", list(overrides)), available)


def test_scaffold_at_ten_thousand_clients_is_refused_with_the_population_that_fits():
    assert check("fed.algorithm=scaffold", *M10K, "clients.rounds=10000") == (
        "run.memory_check: scaffold keeps each client's state on the server: up to 10,000 clients x 6.7 MB = 65.4 GB; "
        "the server's node has 20.0 GB available; clients.population=2677 fits; run.memory_check=false starts it "
        "anyway")


def test_the_clients_a_run_can_reach_bound_the_store():
    # 300 rounds of 10 clients reach at most 3,000 of them: 19.6 GB, refused with the rounds that fit
    assert "up to 3,000 clients" in check("fed.algorithm=scaffold", *M10K, "clients.rounds=300")
    assert "clients.rounds=267 fits" in check("fed.algorithm=scaffold", *M10K, "clients.rounds=300")
    assert check("fed.algorithm=scaffold", *M10K, "clients.rounds=200") is None        # 2,000 clients: 13 GB
    assert check("fed.algorithm=fedavgm", *M10K, "clients.rounds=10000") is None       # stateless clients
    assert check("fed.algorithm=scaffold", *M10K, "clients.rounds=10000", available=None) is None   # unknown
