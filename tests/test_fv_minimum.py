"""FV's adaptive mode with a floor (fv.min_iterations_per_round, issue 24): the server runs FV iterations while
the uploads travel and, where training outpaces FV, waits until the round has its minimum, so w gets a known
least number of chances to move (the adaptive mode alone completed 12 iterations in 96 rounds of FedFace's CPU
study). Under mpirun in the session's shared launch: 2 parties, 4 rounds of 3 steps, tiny validation sets."""
import numpy as np

from fedmpi.store.h5log import LogReader
from shared_runs import declare
from test_equivalence_mpi import SMALL
from test_robust_aggregation import assert_refused

MINIMUM = 2
RUN = declare("fv-adaptive-min2", [*SMALL, "fed.algorithm=fedavg", "fed.K=3", "optim.epochs=4",
                                   "optim.steps_per_epoch=3", "optim.milestones=[2]", "fv.enabled=true",
                                   "fv.iterations_per_round=0", f"fv.min_iterations_per_round={MINIMUM}",
                                   "fv.T=3", "fv.phi=0.3"])


def test_every_round_after_the_first_completes_at_least_the_minimum(shared_runs):
    with LogReader(shared_runs[RUN] / "log.h5") as log:
        rounds, fv = log.table("rounds"), log.table("fv")
    done = rounds["fv_iterations"]
    assert done[0] == 0 and len(done) == 4          # no θ' before the first gather
    assert (done[1:] >= MINIMUM).all(), done
    assert len(fv["round"]) == done.sum()
    assert np.allclose(fv["w"].sum(axis=1), 1.0)


def test_a_minimum_with_the_deterministic_schedule_is_refused_in_one_line():
    assert_refused(["fv.enabled=true", "fv.iterations_per_round=2", "fv.min_iterations_per_round=1"],
                   "fv.min_iterations_per_round: is for the adaptive mode; fv.iterations_per_round=2 already fixes")
    assert_refused(["fv.min_iterations_per_round=-1"], "fv.min_iterations_per_round: must be >= 0, got -1")
