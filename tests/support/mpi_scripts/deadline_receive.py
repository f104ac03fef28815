"""Run under mpirun with 3 ranks: exercises fedmpi.comm's deadline receive, gather, bcast and allreduce, and
prints one JSON line from rank 0 with what happened (messages, seconds waited, CPU seconds used while idle)."""
from __future__ import annotations

import json
import time

from mpi4py import MPI

from fedmpi import comm


def timed(fn):
    wall, cpu = time.monotonic(), time.process_time()
    try:
        value, error = fn(), None
    except comm.CommTimeout as exc:
        value, error = None, str(exc)
    return {"value": value, "error": error, "wall": time.monotonic() - wall, "cpu": time.process_time() - cpu}


def main() -> None:
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    out = {}
    # rank 1 answers after 0.5 s; rank 2 never: the receive from 2 ends after its timeout
    if rank == 1:
        time.sleep(0.5)
        world.send({"loss": 1.5}, dest=0, tag=11)
    if rank == 0:
        out["late"] = timed(lambda: comm.receive(1, 11, what="round 3 statistics", timeout_s=30, comm=world))
        out["idle"] = timed(lambda: comm.receive(2, 11, what="round 4 statistics", timeout_s=2, comm=world))
    world.Barrier()
    # a gather that rank 2 skips
    if rank != 2:
        out["gather"] = timed(lambda: comm.gather(rank * 10, what="round 5 statistics (group fed)", timeout_s=1,
                                                  comm=world))
    world.Barrier()
    out["bcast"] = timed(lambda: comm.bcast("go" if rank == 0 else None, what="checkpoint go-ahead",
                                            timeout_s=5, comm=world))
    out["allreduce"] = timed(lambda: comm.allreduce_max(rank + 3, what="preemption agreement", timeout_s=5,
                                                        comm=world))
    if rank == 0:
        print(json.dumps(out), flush=True)
    world.Barrier()


if __name__ == "__main__":
    main()
