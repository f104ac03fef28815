"""The rendezvous: torch.distributed over all MPI ranks through an MPI-chosen TCP store, each rank pinned to its
node-local GPU; the run's device, backend and collective timeout. The address is chosen by rank 0 and broadcast
over MPI, never read from a hand-set MASTER_ADDR."""
from __future__ import annotations

import datetime
import os
import socket
import sys
from typing import TYPE_CHECKING

from fedmpi.comm import heartbeat
from fedmpi.comm.nodes import local_rank, rendezvous_host, use_mpi_interface

if TYPE_CHECKING:
    import torch

# torch is imported by the functions that use it: fedmpi.run passes through here before it accepts a launch
_STATE: dict = {"device": None, "backend": None, "timeout_s": 600.0}    # device None: the CPU


def mpi_comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def _store_listener(host: str) -> socket.socket:
    """Rank 0's listening socket for the rendezvous store, IPv4, on `host`'s address when that is one of this node's
    (else on every IPv4 address, e.g. for a FEDMPI_RDZV_HOST that is a forwarded address). IPv4, since torch's
    own dual-stack socket sees peers as IPv4-mapped IPv6 addresses, which /etc/hosts does not name: the store then
    warned 'The hostname of the client socket cannot be retrieved' for every rank that connected."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        address = socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
        listener.bind((address, 0))
    except OSError:
        listener.bind(("", 0))
    listener.listen(128)
    return listener


RENDEZVOUS_TIMEOUT_S = 300.0  # every rank joining the TCP store: slow imports on a busy node are no hang


def init_torch_distributed(backend: str | None = None, timeout_s: float = 600.0, comm=None) -> str:
    """Initialise torch.distributed over all MPI ranks; pin each rank to its local GPU when CUDA is present.

    backend: None/'auto' picks nccl with CUDA, gloo without. Returns the backend used. `timeout_s` bounds every
    collective of the groups made by `new_group`; the world group (used by nothing after the rendezvous) gets
    the rendezvous' own, longer, timeout.
    """
    import torch
    import torch.distributed as dist

    comm = comm or mpi_comm()
    if dist.is_initialized():
        return _STATE["backend"]
    if backend in (None, "auto"):
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    world_backend = backend
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise RuntimeError("backend nccl requested but CUDA is not available on this rank")
        gpu = local_rank(comm) % torch.cuda.device_count()
        torch.cuda.set_device(gpu)
        _STATE["device"] = torch.device("cuda", gpu)
        _STATE["gpus"] = comm.allgather((socket.gethostname(), gpu_identity(gpu)))   # (node, GPU) of every rank
        if len(set(_STATE["gpus"])) < len(_STATE["gpus"]):
            world_backend = "gloo"  # NCCL refuses a communicator with two ranks on one GPU (see new_group)
        nccl_reports_errors()
    else:
        _STATE["device"] = torch.device("cpu")
    use_mpi_interface()
    rendezvous_timeout = datetime.timedelta(seconds=max(timeout_s, RENDEZVOUS_TIMEOUT_S))
    listener = None
    if comm.Get_rank() == 0:
        host = rendezvous_host()
        listener = _store_listener(host)
        address = (host, listener.getsockname()[1])
    else:
        address = None
    host, port = comm.bcast(address, root=0)
    store = dist.TCPStore(host, port, comm.Get_size(), is_master=listener is not None, timeout=rendezvous_timeout,
                          wait_for_workers=False,
                          master_listen_fd=listener.detach() if listener is not None else None)
    dist.init_process_group(
        world_backend,
        store=store,
        world_size=comm.Get_size(),
        rank=comm.Get_rank(),
        timeout=rendezvous_timeout,
        device_id=_STATE["device"] if world_backend == "nccl" else None,
    )
    _STATE["backend"], _STATE["timeout_s"] = backend, float(timeout_s)
    heartbeat.start(host, port, comm.Get_rank(), comm.Get_size())
    return backend


def gpu_identity(index: int) -> str:
    """The physical GPU behind CUDA device `index`: its UUID (else its PCI address). The index alone names
    nothing: with one GPU bound per task (srun --gpus-per-task=1, --gpu-bind, cgroups) every rank sees its own
    GPU as device 0."""
    import torch

    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    if uuid is not None and str(uuid):
        return f"GPU-{uuid}" if not str(uuid).startswith("GPU-") else str(uuid)
    return f"PCI {props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}"


NCCL_ERROR_HANDLING = "2"


def nccl_reports_errors() -> None:
    """An NCCL error or timeout aborts the communicators and is raised by the next wait() on the rank, where
    `naming_failures` makes it one line (TORCH_NCCL_ASYNC_ERROR_HANDLING=2, torch's "CleanUpOnly"), instead of
    the watchdog tearing the process down with a stack dump (torch's default, 3). A value the user set stays."""
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", NCCL_ERROR_HANDLING)


def device() -> torch.device:
    import torch

    return _STATE["device"] or torch.device("cpu")


def backend() -> str | None:
    return _STATE["backend"]


def collective_timeout_s() -> float:
    return _STATE["timeout_s"]


def shutdown() -> None:
    heartbeat.stop()
    dist = sys.modules.get("torch.distributed")    # never imported (a refused launch): nothing to destroy
    if dist is not None and dist.is_initialized():
        dist.destroy_process_group()
