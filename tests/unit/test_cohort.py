"""A cohort trained as one batch (clients.cohort=vectorised, fedmpi/crossdevice/cohort.py) against the client-by-client
loop, one process: the same round's payload sum_k n_k [theta_k | up payloads], the clients' mean losses and their
states (SCAFFOLD's c_i, FedDyn's lambda_k) from the same global payload, batches and augmentation draws.

Tolerances, relative to the largest value of each part (the mean update sum_k n_k theta_k / n - Theta, the up
payloads, the clients' states): the grouped convolutions sum in another order than one client's, so nothing is
bitwise; float64 within 1e-13 (measured: at most 4.5e-16), float32 within 1e-4 (measured: at most 3.1e-5, MIME-lite's
gradient at the server model; 1.2e-5 to 2.2e-5 for the updates)."""
from __future__ import annotations

import pytest
import torch

from crossdevice_harness import CONFIG
from fedmpi.config import ConfigError, load_config
from fedmpi.core.build import build_parts
from fedmpi.crossdevice.client_data import open_client_data
from fedmpi.crossdevice.cohort import VectorisedCohort, vectorisable_model
from fedmpi.crossdevice.local_training import LocalTrainer

CPU = torch.device("cpu")
SMALL = ["clients.population=6", "clients.images=8", "clients.train_images=60", "clients.test_images=20",
         "clients.alpha=0.5", "optim.batch_size=4", "clients.epochs=2", "eval.every=0", "run.device=cpu"]
RULES = {"fedavg": ["fed.algorithm=fedavg"],
         "fedavgm-momentum-augment": ["fed.algorithm=fedavgm", "fed.local_momentum=0.9", "clients.augment=true"],
         "fedprox": ["fed.algorithm=fedprox", "fed.options.mu=0.1"],
         "scaffold": ["fed.algorithm=scaffold"],
         "mime_lite": ["fed.algorithm=mime_lite"],
         "feddyn": ["fed.algorithm=feddyn"]}
CLIENTS = [0, 3, 5]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("cohort-data")


def both_rounds(overrides: list[str], dtype):
    """One trainer rank's round of CLIENTS from a perturbed global payload (and random client states), client by
    client and then as one cohort, by the same trainer: (payload, statistics, states) of each, and D."""
    cfg = load_config(CONFIG, overrides)
    parts = build_parts(cfg, CPU, dtype)
    local = LocalTrainer(parts.model, parts.state, parts.rule, open_client_data(cfg), epochs=cfg.clients.epochs,
                         batch_size=cfg.optim.batch_size, seed=3, augment=cfg.clients.augment, device=CPU,
                         dtype=dtype)
    g = torch.Generator().manual_seed(1)
    local.down.flat.add_(0.01 * torch.randn(local.down.flat.shape, generator=g, dtype=dtype))
    states = ([0.01 * torch.randn(local.layout.numel, generator=g, dtype=dtype) for _ in CLIENTS]
              if local.layout else None)
    out = []
    for cohort in (None, VectorisedCohort(local)):
        local.cohort = cohort
        mine = [s.clone() for s in states] if states else None
        out.append((*local.train_round(local.down.flat, CLIENTS, 1, 0.05, mine), mine))
    return out, local.down.theta.to(torch.float64)


CASES = [(rule, torch.float64) for rule in RULES] + [(rule, torch.float32) for rule in ("fedavgm-momentum-augment",
                                                                                         "scaffold", "mime_lite")]


@pytest.mark.parametrize("rule,dtype", CASES, ids=[f"{r}-{str(d)[6:]}" for r, d in CASES])
def test_a_vectorised_cohort_trains_as_the_client_by_client_loop(data_root, rule, dtype):
    ((loop, stats, states), (cohort, cohort_stats, cohort_states)), theta = both_rounds(
        [*SMALL, *RULES[rule], f"data.root={data_root}"], dtype)
    D = theta.numel()
    n = float(loop[-1])
    assert n == 24 and cohort[-1] == n
    f64 = dtype == torch.float64
    tolerance = 1e-13 if f64 else 1e-4
    parts = [("update", loop[:D] / n - theta, cohort[:D] / n - theta)]
    if loop.numel() - 1 > D:     # the rule's up payloads (SCAFFOLD's Delta c_i, MIME-lite's gradient)
        parts.append(("up", loop[D:-1] / n, cohort[D:-1] / n))
    for name, a, b in parts:
        assert (a - b).abs().max() <= tolerance * a.abs().max(), (name, (a - b).abs().max(), a.abs().max())
    assert cohort_stats["loss_sum"] == pytest.approx(stats["loss_sum"], rel=1e-12 if f64 else 1e-6)
    assert {k: v for k, v in cohort_stats.items() if k != "loss_sum"} == {k: v for k, v in stats.items()
                                                                        if k != "loss_sum"}
    if states is not None:       # each client's state came back, updated as the loop updates it
        for a, b in zip(states, cohort_states):
            assert (a - b).abs().max() <= tolerance * a.abs().max()


def test_a_rule_that_cannot_be_stacked_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError) as raised:
        load_config(CONFIG, [*SMALL, "fed.algorithm=pfm", "clients.cohort=vectorised"])
    assert str(raised.value) == ("clients.cohort: vectorised: pfm's local step cannot run on stacked clients "
                                 "(Algorithm.cohort_vectorisable); use clients.cohort=sequential or auto")
    auto = load_config(CONFIG, [*SMALL, "fed.algorithm=pfm", "clients.cohort=auto"])
    assert not auto.clients.vectorised(auto, "cuda")             # auto keeps PFM's clients one after another
    fedavg = load_config(CONFIG, [*SMALL, "clients.cohort=auto"])
    assert fedavg.clients.vectorised(fedavg, "cuda") and not fedavg.clients.vectorised(fedavg, "cpu")


def test_a_model_with_batchnorm_statistics_is_not_stacked():
    assert vectorisable_model(torch.nn.Sequential(torch.nn.Linear(2, 2))) is None
    assert "BatchNorm" in vectorisable_model(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2)))
