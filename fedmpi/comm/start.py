"""Starting MPI: `start_mpi()` initialises it (importing mpi4py's MPI does) and returns the module once every rank
has left MPI_Init, so that no rank sends an MPI message to one still inside it.

Why: Open MPI 5.0.x sets MPI_COMM_WORLD up in its point-to-point layer (ob1) only after the exchange of addresses
in MPI_Init. A message that reaches a rank still waiting in that exchange makes ob1 look up a communicator it has
not set up, and the rank dies with SIGSEGV in `mca_pml_ob1_recv_frag_callback_match` (Open MPI issue 12495, under
srun). MPI_Init's last fence should keep the ranks together, but it collects no data, and Slurm's PMIx plugin
answers such a fence at once: one node's ranks can leave MPI_Init and send (fedmpi's first message is the node
survey's) while another node's are still inside. One PMIx fence that collects data, after MPI_Init, closes that
window. PMIx is the
launcher's channel (srun --mpi=pmix, mpirun), not MPI's, so the fence cannot be the message that crashes a rank.
docs/CLUSTER.md ("MPI: the site's or the wheel's") has the figures.

Where MPI is not Open MPI over PMIx (MPICH, Intel MPI, a rank started without a launcher), nothing is added."""
from __future__ import annotations

import ctypes
import os

PMIX_LIBRARY = "libpmix.so.2"   # the soname Open MPI 5 links (its own PMIx or the site's)
PMIX_SUCCESS = 0
PMIX_BOOL = 1
# Slurm's PMIx plugin answers a fence that collects no data at once, without waiting for the other processes
# (unless the site set PMIxFenceBarrier in mpi.conf): only a fence that collects is a barrier under srun.
PMIX_COLLECT_DATA = b"pmix.collect"
INFO_BYTES = 4096                # room for one pmix_info_t (about 550 bytes in PMIx 4 and 5)


def start_mpi():
    """mpi4py's MPI, initialised, with every rank past MPI_Init (see the module's doc)."""
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_size() > 1 and MPI.Get_library_version().startswith("Open MPI"):
        launcher_fence()
    return MPI


def launcher_fence() -> bool:
    """A PMIx fence over the job's processes (a barrier held by the launcher), through the PMIx library Open MPI
    already loaded. False where there is none to hold (no PMIx loaded, or PMIx not initialised); a fence the
    launcher refuses raises RuntimeError naming its status."""
    pmix = loaded_library(PMIX_LIBRARY)
    if pmix is None or not pmix.PMIx_Initialized():
        return False
    pmix.PMIx_Info_load.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_uint16]
    pmix.PMIx_Fence.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
    pmix.PMIx_Fence.restype = ctypes.c_int
    info = ctypes.create_string_buffer(INFO_BYTES)            # one pmix_info_t, zeroed
    collect = ctypes.c_bool(True)
    pmix.PMIx_Info_load(info, PMIX_COLLECT_DATA, ctypes.byref(collect), PMIX_BOOL)
    status = pmix.PMIx_Fence(None, 0, info, 1)   # no processes named: every process of this job
    if status != PMIX_SUCCESS:
        pmix.PMIx_Error_string.restype = ctypes.c_char_p
        raise RuntimeError(f"the launcher's fence after MPI_Init failed: PMIx status {status} "
                           f"({pmix.PMIx_Error_string(status).decode(errors='replace')})")
    return True


def loaded_library(name: str):
    """The shared library `name` if this process has loaded it already (never loads one)."""
    try:
        return ctypes.CDLL(name, mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)
    except OSError:
        return None
