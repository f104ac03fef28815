"""Under a launcher (mpirun, srun --mpi=pmix): rank 0 sleeps SLEEP_S before fedmpi's fence after MPI_Init
(fedmpi/comm/start.py), the others go straight to it; each prints `rank R fenced F waited S` (S: seconds in the
fence). A fence that is a barrier holds every other rank for about SLEEP_S.

    python tests/support/mpi_scripts/launcher_fence.py SLEEP_S
"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from mpi4py import MPI  # noqa: E402

from fedmpi.comm.start import launcher_fence  # noqa: E402

rank = MPI.COMM_WORLD.Get_rank()
if rank == 0:
    time.sleep(float(sys.argv[1]))
t = time.perf_counter()
fenced = launcher_fence()
print(f"rank {rank} fenced {fenced} waited {time.perf_counter() - t:.3f}", flush=True)
