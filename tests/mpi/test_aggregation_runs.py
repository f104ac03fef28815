"""Robust and private aggregation through fedmpi.run under mpirun (2 parties: a of 2 ranks, b of 1): the
coordinate-wise median of two uploads is their mean, so FedAvg with it ends where FedAvg does; DP-FedAvg with
adaptive clipping logs ε after every round, stops before its target ε is passed, and resumed from its first
checkpoint adds the same noise and clips with the same C as the run that was not interrupted."""
import numpy as np
import torch

from algorithm_harness import checkpoint_parts, declare_rule, launch_rule
from fedmpi.aggregation.accounting import epsilon
from fedmpi.store.h5log import LogReader
from shared_runs import declare
from test_equivalence_mpi import K3, SMALL

MEDIAN = declare("median-fedavg-k3", [*SMALL, "fed.algorithm=fedavg", *K3, "fed.aggregation.rule=median"])
MEAN = declare("eq-fedavg-k3", [*SMALL, "fed.algorithm=fedavg", *K3])      # test_equivalence_mpi's run

# 3 rounds planned; ε(2) = 9.23 <= 10 < ε(3) = 11.8 at z = 0.8, δ = 1e-5: the run stops after round 2
DP = ["fed.algorithm=pfm", "fv.enabled=false", "run.deterministic=true", "fed.dp.enabled=true",
      "fed.dp.noise_multiplier=0.8", "fed.dp.clip=0.05", "fed.dp.adaptive=true", "fed.dp.count_noise=1.0",
      "fed.dp.target_epsilon=10", "fed.dp.seed=3"]
DP_WHOLE = declare_rule("dp-pfm", DP, rounds=3)


def final_theta(shared_runs, name):
    return torch.load(f"{shared_runs[name]}.pt")["theta"]


def test_fedavg_with_the_median_of_two_parties_ends_where_fedavg_ends(shared_runs):
    median, mean = final_theta(shared_runs, MEDIAN), final_theta(shared_runs, MEAN)
    assert not torch.equal(median, torch.zeros_like(median))
    assert torch.allclose(median, mean, rtol=0, atol=1e-12)


def test_dp_logs_epsilon_every_round_and_stops_before_the_target(shared_runs):
    with LogReader(shared_runs[DP_WHOLE] / "log.h5") as log:
        privacy, rounds = log.table("privacy"), log.table("rounds")
    assert list(rounds["round"]) == [0, 1] and list(privacy["round"]) == [0, 1]
    np.testing.assert_allclose(privacy["epsilon"], [epsilon(1, 0.8, 1e-5), epsilon(2, 0.8, 1e-5)], rtol=1e-12)
    assert privacy["clip"][0] == 0.05 and privacy["clip"][1] != 0.05          # adaptive: C moved after round 1
    assert np.all(privacy["noise_std"] > 0) and np.all(np.isfinite(privacy["unclipped"]))


def test_dp_resumed_after_round_1_ends_bitwise_equal(shared_runs, tmp_path):
    whole = shared_runs[DP_WHOLE]
    resumed = launch_rule(tmp_path, "dp-resumed", [*DP, "--resume", str(whole / "ckpt" / "round_000001")],
                          rounds=3, data=whole.parent / "data")
    a, b = checkpoint_parts(whole, 2)["server.h5"], checkpoint_parts(resumed, 2)["server.h5"]
    assert torch.equal(a["theta"], b["theta"])
    assert torch.equal(a["aggregator"]["generator"], b["aggregator"]["generator"])
    assert torch.equal(a["aggregator"]["clip"], b["aggregator"]["clip"])
    assert not (whole / "ckpt" / "round_000003").exists()
