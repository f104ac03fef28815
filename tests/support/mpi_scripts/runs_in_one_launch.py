"""mpirun worker: several runs of `python -m fedmpi.run`, one after the other, in one launch (one start-up of
torch and MPI for all of them). Each run sets up and tears down its own process groups, as a launch does, and
starts from the process-wide state a fresh launch has: the global RNGs as they were at start-up and
non-deterministic kernels (run.deterministic=true switches them on for the rest of the process).

usage: runs_in_one_launch.py PLAN.json   (PLAN: a JSON list of argument lists, each what `python -m fedmpi.run`
would be given). Ends with the status of the first run that fails, else 0."""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

from fedmpi.run import main


def run_all(plan: list[list[str]], before=None) -> int:
    """before(i): called before the i-th run starts (the harness's seeded entropy, harness_runs.py)."""
    fresh = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    for i, argv in enumerate(plan):
        if before:
            before(i)
        random.setstate(fresh[0])
        np.random.set_state(fresh[1])
        torch.set_rng_state(fresh[2])
        torch.use_deterministic_algorithms(False)
        if MPI.COMM_WORLD.rank == 0:     # one marker a run, so that a launch's output splits into its runs
            print(f"=== fedmpi.run {' '.join(argv)}", flush=True)
        code = main(argv)
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(run_all(json.loads(Path(sys.argv[1]).read_text())))
