"""MPI + torch.distributed set-up: rendezvous through MPI, device pinning, process groups, flat buffers.

Control messages (round numbers, weightings, scores, stop/abort) use mpi4py, with a deadline (`fedmpi.comm.control`,
re-exported here: receive, gather, bcast, barrier, allreduce_max); tensors use
torch.distributed (NCCL when CUDA is present, gloo otherwise). The rendezvous address is chosen by rank 0
and broadcast over MPI, never read from a hand-set MASTER_ADDR.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import socket
import sys
import time
import traceback
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from fedmpi.comm.control import (CommFailure, CommTimeout, allreduce_max, barrier, bcast, gather,  # noqa: F401
                            receive)
from fedmpi.comm import heartbeat
from fedmpi.comm.nodes import describe_ranks, local_rank, mpi_interface, rendezvous_host, use_mpi_interface  # noqa: F401

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


def group_backend(ranks: Sequence[int]) -> str | None:
    """The backend of a group over `ranks`: the run's, except that with NCCL a group whose ranks share a GPU
    (several ranks on a node with fewer GPUs) gets gloo, which NCCL leaves no choice about: it refuses two ranks
    on one GPU. gloo moves CUDA tensors through host memory (broadcast, all-reduce, gather, all-gather)."""
    if _STATE["backend"] != "nccl":
        return None
    gpus = [_STATE["gpus"][r] for r in ranks]
    return "nccl" if len(set(gpus)) == len(gpus) else "gloo"


def new_group(ranks: Sequence[int]):
    """A torch.distributed group over the given world ranks, with the run's collective timeout (set by
    `init_torch_distributed`). Every rank must call this, in the same order. Where ranks of the group share a
    GPU, the group is gloo and rank 0 says so once per group."""
    ranks = sorted(ranks)
    backend = group_backend(ranks)
    if backend == "gloo" and mpi_comm().Get_rank() == 0:
        node, gpu = _STATE["gpus"][ranks[0]]
        print(f"note: group of ranks {', '.join(map(str, ranks))} uses gloo, not NCCL: ranks share a GPU "
              f"(e.g. GPU {gpu} on {node}), and NCCL refuses two ranks on one GPU", flush=True)
    import torch.distributed as dist

    return dist.new_group(ranks=ranks, timeout=datetime.timedelta(seconds=collective_timeout_s()), backend=backend)


def collective_timeout_s() -> float:
    return _STATE["timeout_s"]


def shutdown() -> None:
    heartbeat.stop()
    dist = sys.modules.get("torch.distributed")    # never imported (a refused launch): nothing to destroy
    if dist is not None and dist.is_initialized():
        dist.destroy_process_group()


# ---------------------------------------------------------------- flat buffers


def state_tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    """Parameters, then floating-point buffers (BN running stats) — what a backbone's state is made of.

    Integer buffers (num_batches_tracked) are left out: they are counters, not averaged state.
    """
    params = [p for p in module.parameters()]
    buffers = [b for b in module.buffers() if b.is_floating_point()]
    return params + buffers


def flatten(tensors: Iterable[torch.Tensor], out: torch.Tensor | None = None) -> torch.Tensor:
    """Copy tensors into one contiguous 1-D buffer (allocated when `out` is None)."""
    tensors = list(tensors)
    total = sum(t.numel() for t in tensors)
    if out is None:
        import torch

        out = torch.empty(total, dtype=tensors[0].dtype, device=tensors[0].device)
    offset = 0
    for t in tensors:
        n = t.numel()
        out[offset:offset + n].copy_(t.detach().reshape(-1))
        offset += n
    return out


def unflatten_into(flat: torch.Tensor, tensors: Iterable[torch.Tensor]) -> None:
    """Copy a flat buffer back into the given tensors (in place, same order as `flatten`)."""
    import torch

    offset = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(flat[offset:offset + n].view_as(t))
            offset += n


@contextlib.contextmanager
def naming_failures(what: str):
    """Around torch.distributed calls (and calls that make them): a failure or a timeout of the backend becomes
    one line that says what was going on (`what`, e.g. the round or the group and its ranks); nested uses add
    to the line from the outside in: 'round 4: gather of theta_i over group leaders (ranks 0, 1, 3): ...'."""
    try:
        yield
    except CommTimeout as exc:
        raise CommTimeout(f"{what}: {exc}") from None
    except RuntimeError as exc:  # gloo and NCCL failures (DistBackendError is one)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if type(exc).__name__ == "OutOfMemoryError":    # this rank's own failure, not a peer's silence
            raise DeviceOutOfMemory(f"{what}: {first}") from None
        if "timed out" in first.lower() or "timeout" in first.lower():
            raise CommTimeout(f"{what}: no answer within run.collective_timeout_s={collective_timeout_s():g} s "
                              f"({first})") from None
        raise CommFailure(f"{what}: {first}") from None


class DeviceOutOfMemory(RuntimeError):
    """The device ran out of memory on this rank (torch.OutOfMemoryError), named with what was going on."""


def group_label(name: str, group) -> str:
    """'group NAME (ranks 0, 1, 3 on NODE)' for messages (nodes.describe_ranks)."""
    import torch.distributed as dist

    return f"group {name} ({describe_ranks(list(dist.get_process_group_ranks(group)))})"


# ---------------------------------------------------------------- failure discipline


SECONDARY_GRACE_S = 3.0
OUTPUT_GRACE_S = 0.5


def run_guarded(role: str, fn: Callable[[], int | None], on_failure: Callable[[], None] | None = None) -> int:
    """Run one rank's work; any exception prints `rank R (role): message` and aborts the whole MPI job
    (`on_failure` runs first, after the message: it undoes what a failed start left behind)."""
    comm = mpi_comm()
    try:
        code = fn()
        return int(code or 0)
    except SystemExit as exc:  # a deliberate exit with a message (e.g. a config error found on one rank)
        if exc.code in (0, None):
            return 0
        message = exc.code if isinstance(exc.code, str) else f"exit status {exc.code}"
        _abort(comm, role, message, on_failure)
    except BaseException as exc:  # noqa: BLE001 - every failure must abort the job, never hang it
        if os.environ.get("FEDMPI_TRACEBACK"):
            traceback.print_exc()
        if isinstance(exc, CommFailure):  # most often the echo of another rank's failure: let that one speak
            time.sleep(SECONDARY_GRACE_S)  # first; the job usually ends before this line is printed at all
        message = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, (CommTimeout, CommFailure)):
            silent = heartbeat.silent_ranks()   # who is missing: a timeout of the backend does not say
            if silent:
                message += f"; stopped answering: {silent}"
        _abort(comm, role, message, on_failure)
    return 1


def _abort(comm, role: str, message: str, on_failure: Callable[[], None] | None = None) -> None:
    sys.stderr.write(f"rank {comm.Get_rank()} ({role}): {message}\n")
    sys.stderr.flush()
    sys.stdout.flush()
    time.sleep(OUTPUT_GRACE_S)  # mpirun forwards the line before the abort tears the job down
    if on_failure is not None:
        try:
            on_failure()
        except Exception:  # noqa: BLE001 - the abort below matters more than a clean-up
            pass
    comm.Abort(1)
