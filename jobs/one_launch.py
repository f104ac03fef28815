"""mpirun worker: several runs of `python -m fedmpi.run`, one after the other, in one launch (one start-up of
torch and MPI for all of them: about 2.3 s of CPU a rank, which a tiny run costs again). Each run sets up and tears
down its own process groups, as a launch does, and starts from the process-wide state a fresh launch has: the
global RNGs as they were at start-up and non-deterministic kernels (run.deterministic=true switches them on for
the rest of the process). With --lock FILE each run holds FILE (an flock taken by rank 0) only while it runs, as
a launch of its own under `flock FILE` would; the ranks wait for it asleep.

    mpirun -n N python -m jobs.one_launch PLAN.json [--lock FILE]

PLAN: a JSON list of argument lists, each what `python -m fedmpi.run` would be given. Rank 0 prints
`=== fedmpi.run ARGS` before each run, so that a launch's output splits into its runs. Ends with the status of
the first run that fails, else 0."""
from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from jobs.local import LockHolder

MARK = "=== fedmpi.run "
WAIT_POLL_S = 0.05


def wait_together(comm) -> None:
    """A barrier that sleeps while it waits: Open MPI's blocking one spins a core, which the run holding the lock
    needs."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(WAIT_POLL_S)


def run_all(plan: list[list[str]], before=None, lock: str | None = None, main=None, comm=None) -> int:
    """before(i): called before the i-th run starts (the test harness's seeded entropy); main and comm: fedmpi.run's
    main and MPI's world unless given."""
    import numpy as np
    import torch

    if main is None:
        from fedmpi.run import main
    if comm is None:
        from fedmpi.comm.start import start_mpi
        comm = start_mpi().COMM_WORLD
    holder = LockHolder(lock if comm.Get_rank() == 0 else None)
    fresh = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    for i, argv in enumerate(plan):
        if before:
            before(i)
        random.setstate(fresh[0])
        np.random.set_state(fresh[1])
        torch.set_rng_state(fresh[2])
        torch.use_deterministic_algorithms(False)
        if lock:
            holder.acquire()
            wait_together(comm)
        if comm.Get_rank() == 0:
            print(f"{MARK}{' '.join(argv)}", flush=True)
        code = main(argv)
        if lock:
            wait_together(comm)
            holder.release()
        if code:
            return code
    return 0


def last_run(stdout: str) -> str:
    """The arguments of the run a launch's output ends in (the one that failed, where one did); "" before any."""
    _, mark, after = stdout.rpartition(MARK)
    return after.partition("\n")[0] if mark else ""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", help="a JSON list of argument lists of fedmpi.run")
    parser.add_argument("--lock", default=None, help="a file each run holds (flock) only while it runs")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    raise SystemExit(run_all(json.loads(Path(args.plan).read_text()), lock=args.lock))
