"""Process groups over world ranks: the backend each gets (NCCL, or gloo where ranks share a GPU), the run's
collective timeout, and how a group is named in messages."""
from __future__ import annotations

import datetime
from typing import Sequence

from fedmpi.comm.nodes import describe_ranks
from fedmpi.comm.rendezvous import _STATE, collective_timeout_s, mpi_comm


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


def group_label(name: str, group) -> str:
    """'group NAME (ranks 0, 1, 3 on NODE)' for messages (nodes.describe_ranks)."""
    import torch.distributed as dist

    return f"group {name} ({describe_ranks(list(dist.get_process_group_ranks(group)))})"
