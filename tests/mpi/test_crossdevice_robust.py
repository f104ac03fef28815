"""Robust aggregation in the cross-device setting: every sampled client's upload reaches the server in its own
row (not summed on the trainer ranks), so FedMedian, the trimmed mean and Krum see each client. Under mpirun on
2 trainer ranks the global model equals the one-process reference (tests/support/crossdevice_harness.py), which applies
the same rule to the clients' uploads; a rule whose requirement the round's clients cannot meet is refused."""
import pytest
import torch

from crossdevice_harness import CONFIG, simulate
from fedmpi.store.h5log import LogReader
from jobs.mpirun import mpirun
from test_crossdevice_mpi import TINY
from test_robust_aggregation import assert_refused

RULES = {"median": ["fed.aggregation.rule=median"],
         "krum": ["fed.aggregation.rule=krum", "fed.aggregation.f=0"]}


def test_the_reference_median_is_the_median_of_the_clients_uploads(tmp_path):
    """One round of FedAvg, whose server step is the aggregate itself: Θ is the coordinate-wise median of the 3
    sampled clients' models (the middle value of each coordinate), not their weighted mean."""
    one = [*TINY, "clients.rounds=1", "fed.algorithm=fedavg", f"data.root={tmp_path}"]
    median, mean = simulate([*one, *RULES["median"]]), simulate(one)
    rows = median.last_rows
    assert rows.shape[0] == 3 and torch.equal(rows, mean.last_rows)
    assert torch.equal(median.theta, rows.sort(dim=0).values[1])
    assert (median.theta - mean.theta).abs().max() > 1e-6


@pytest.mark.parametrize("rule", sorted(RULES))
def test_mpirun_on_2_trainer_ranks_equals_the_reference(tmp_path, rule):
    overrides = [*TINY, "fed.algorithm=fedavgm", "run.dtype=float64", "clients.ranks=2", *RULES[rule],
                 f"data.root={tmp_path / 'data'}"]
    out = mpirun(3, ["-m", "fedmpi.run", "--config", CONFIG, *overrides, f"log.dir={tmp_path}", f"log.name={rule}",
                     f"run.save_final={tmp_path / 'final.pt'}"], timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    expected = simulate(overrides)
    theta = torch.load(tmp_path / "final.pt")["theta"]
    assert (theta - expected.theta).abs().max() < 1e-9
    with LogReader(tmp_path / rule / "log.h5") as log:
        rounds = log.table("rounds")
    D = theta.numel()
    assert rounds["bytes_up"].tolist() == [3 * D * 8] * 3      # 3 clients a round, one float64 row each


def test_krum_with_too_few_clients_per_round_is_refused_in_one_line():
    assert_refused([*TINY, "fed.aggregation.rule=krum", "fed.aggregation.f=1"],
                   "fed.aggregation.f: krum needs n > 2f + 2 uploads: n = 3, f = 1", CONFIG)
