"""A rule with payloads both ways and per-party state (SCAFFOLD: c down, Δc_i up, c_i on the trainers) through
the round loop under mpirun: resumed from the checkpoint after round 1 it ends bitwise equal to the run that
was not interrupted (the resumed run in a launch of its own); with FV on (hosted), FV searches over the backbone
part of the uploads only."""
import numpy as np
import torch

from algorithm_harness import checkpoint_parts, declare_rule, launch_rule
from fedmpi.store.h5log import LogReader


DETERMINISTIC = ["fed.algorithm=scaffold", "run.deterministic=true"]
WHOLE = declare_rule("scaffold-whole", DETERMINISTIC)            # made in the shared launch
WITH_FV = declare_rule("scaffold-fv", ["fed.algorithm=scaffold", "fv.enabled=true", "fv.iterations_per_round=1",
                                       "fv.T=2", "data.val_sets=[lfw]"], rounds=3)


def test_scaffold_resumed_after_round_1_ends_bitwise_equal(shared_runs, tmp_path):
    whole = shared_runs[WHOLE]
    resumed = launch_rule(tmp_path, "resumed", [*DETERMINISTIC, "--resume", str(whole / "ckpt" / "round_000001")],
                          data=whole.parent / "data")
    a, b = checkpoint_parts(whole, 2), checkpoint_parts(resumed, 2)
    assert torch.equal(a["server.h5"]["theta"], b["server.h5"]["theta"])
    assert torch.equal(a["server.h5"]["algorithm"]["control"], b["server.h5"]["algorithm"]["control"])
    for x, y in zip(a["party-b-0.h5"]["algorithm"]["control"], b["party-b-0.h5"]["algorithm"]["control"]):
        assert torch.equal(x, y)


def test_scaffold_with_fv_searches_the_weighting(shared_runs):
    run = shared_runs[WITH_FV]
    with LogReader(run / "log.h5") as log:
        fv, rounds = log.table("fv"), log.table("rounds")
    assert list(fv["round"]) == [1, 2] and list(rounds["fv_iterations"]) == [0, 1, 1]
    assert np.allclose(checkpoint_parts(run, 3)["server.h5"]["w"].numpy(), fv["w"][-1], atol=0, rtol=0)
