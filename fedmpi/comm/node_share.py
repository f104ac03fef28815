"""One copy per node of what a party's ranks hold identically, on CPU: the global payload [Θ | down payloads] that
each round brings, and the rule's global_state that every rank rebuilds from it the same way (PFM's M, eq. 6).
Both live in MPI-3 shared memory (a window of the party's ranks on the node); the party's lowest rank on the node,
its keeper, receives the payload into it and rebuilds the state, the others wait at the party's barrier and read.
Across nodes the keepers pass the payload on over a group of their own, so a party's broadcast crosses each of its
nodes' links once. On GPUs every rank keeps its own copy on its device: nothing is shared there.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from fedmpi.comm import nodes

if TYPE_CHECKING:
    import torch


_SHARED: set[int] = set()   # where the shared tensors of this process start (for bench/memory_probe.py)


def is_shared(tensor: torch.Tensor) -> bool:
    """The tensor's memory is one of the node's shared copies (counted once per node, not per rank)."""
    return tensor.untyped_storage().data_ptr() in _SHARED


def keepers(ranks: tuple[int, ...]) -> list[int]:
    """The lowest of `ranks` on each node, in rank order (the survey's placement; one rank if it was not taken)."""
    first: dict[str | None, int] = {}
    for r in sorted(ranks):
        first.setdefault(nodes.node_of(r), r)
    return sorted(first.values())


def quiet_open_mpi_windows() -> None:
    """Open MPI's UCX one-sided component prints an error for every window on a machine without UCX hardware; the
    windows here are node-local, which its shared-memory component serves. Before MPI starts (a site's setting
    stays)."""
    os.environ.setdefault("OMPI_MCA_osc", "^ucx")


class NodeShare:
    """The ranks of one party on one node. `keeps`: this rank is the keeper; `keepers`: the torch group of the
    party's keepers when the party spans nodes (None on one node); `party`: the party's group, for the barrier."""

    def __init__(self, node_comm, party_group, keepers_group, label: str):
        self._comm, self._party, self._label = node_comm, party_group, label
        self.keeps = node_comm.Get_rank() == 0
        self.keepers = keepers_group
        self._windows: list = []

    def zeros(self, numel: int, dtype: "torch.dtype") -> "torch.Tensor":
        """A zeroed tensor of `numel` values in memory the party's ranks on this node share (collective over them)."""
        import torch
        from mpi4py import MPI

        item = torch.empty((), dtype=dtype).element_size()
        window = MPI.Win.Allocate_shared(numel * item if self.keeps else 0, item, comm=self._comm)
        self._windows.append(window)
        memory, _ = window.Shared_query(0)
        tensor = torch.frombuffer(memory, dtype=dtype, count=numel)
        _SHARED.add(tensor.untyped_storage().data_ptr())
        if self.keeps:
            tensor.zero_()
        self._comm.Barrier()
        return tensor

    def like(self, tensor: torch.Tensor) -> torch.Tensor:
        """A shared copy of `tensor` (the keeper's values)."""
        shared = self.zeros(tensor.numel(), tensor.dtype).view_as(tensor)
        if self.keeps:
            shared.copy_(tensor)
        self._comm.Barrier()
        return shared

    def wait_for_party(self, what: str) -> None:
        """Every rank of the party has come here: before the keeper overwrites what the others read, and before
        they read what it wrote."""
        import torch.distributed as dist

        from fedmpi import comm

        with comm.naming_failures(f"{what}: barrier over {comm.group_label(self._label, self._party)}"):
            dist.barrier(group=self._party)


def shared_parties(layout, shares: bool) -> list:
    """The parties whose ranks share: every party of more than one rank, when sharing is on."""
    return [p for p in layout.parties if len(p.ranks) > 1] if shares else []


def share_for(groups, layout, rank: int, mpi, shares: bool) -> NodeShare | None:
    """This trainer rank's NodeShare, or None (not a trainer of a shared party). A collective of MPI_COMM_WORLD:
    every rank calls it, in the same place, with the same `shares`."""
    from mpi4py import MPI

    party = next((p for p in shared_parties(layout, shares) if rank in p.ranks), None)
    by_party = mpi.Split(party.index if party is not None else MPI.UNDEFINED, key=rank)
    if by_party == MPI.COMM_NULL:
        return None
    node_comm = by_party.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    by_party.Free()
    return NodeShare(node_comm, groups.party, groups.party_keepers, party.name)
