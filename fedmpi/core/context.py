"""Where a rank stands once MPI and torch.distributed are up: its place in the rank plan, the process groups, the
control channel, the device and the dtype. Built once per rank by `fedmpi.run`; the run's parts (the rule, the
model, the aggregator) come from core/build.py, and each seam takes what it uses of the two."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from fedmpi import comm
from fedmpi.comm.node_share import keepers, share_for, shared_parties
from fedmpi.layout import SERVER, Layout


@dataclass
class Groups:
    """torch.distributed groups (None where this rank is not a member or the group would be trivial)."""
    party: object | None          # this trainer's party (gradient average, sharded classifier, intra-party bcast)
    leaders: object | None        # server + party leaders (gather of theta_i, broadcast of Theta)
    validators: object | None     # server + dedicated validators (FV candidates)
    party_keepers: object | None = None   # this party's keepers when it spans nodes (comm/node_share.py)


@dataclass(frozen=True)
class Control:
    """The rounds' control messages (statistics, client assignments, the preemption agreement): MPI over the
    server and the trainers, every exchange bounded by run.collective_timeout_s."""
    mpi: object
    timeout_s: float


@dataclass
class Context:
    layout: Layout
    rank: int
    groups: Groups
    control: Control
    device: torch.device
    dtype: torch.dtype
    node_share: object | None = None   # this trainer's party on its node (comm/node_share.py), CPU only
    shares: bool = False               # the parties' ranks share one copy per node (run.share_node_memory, CPU)

    @property
    def role(self) -> str:
        return self.layout.role(self.rank)


def make_groups(layout: Layout, rank: int, shares: bool = False) -> Groups:
    """Create every group on every rank in the same order (torch.distributed requires it). `shares`: the parties'
    ranks share one copy per node of the global payload (node_share), which the keepers pass on across nodes."""
    party_group = keepers_group = None
    for party in layout.parties:
        if len(party.ranks) > 1:
            g = comm.new_group(party.ranks)
            if rank in party.ranks:
                party_group = g
    for party in shared_parties(layout, shares):
        party_keepers = keepers(party.ranks)
        if len(party_keepers) > 1:
            g = comm.new_group(party_keepers)
            if rank in party_keepers:
                keepers_group = g
    leaders = comm.new_group([SERVER] + [p.leader for p in layout.parties])
    validators = comm.new_group([SERVER, *layout.validators]) if layout.validators else None
    is_leader = rank == SERVER or any(rank == p.leader for p in layout.parties)
    return Groups(party=party_group, leaders=leaders if is_leader else None,
                  validators=validators if (rank == SERVER or rank in layout.validators) else None,
                  party_keepers=keepers_group)


def build_context(cfg, layout: Layout) -> Context:
    mpi = comm.mpi_comm()
    rank = mpi.Get_rank()
    backend = {"auto": None, "cpu": "gloo", "cuda": "nccl"}[cfg.run.device]
    comm.init_torch_distributed(backend, timeout_s=cfg.run.collective_timeout_s)
    shares = shares_node_memory(cfg)
    groups = make_groups(layout, rank, shares)
    in_fed = rank not in layout.validators
    control = Control(mpi.Split(0 if in_fed else 1, key=rank), cfg.run.collective_timeout_s)
    node_share = share_for(groups, layout, rank, mpi, shares)
    dtype = torch.float64 if cfg.run.dtype == "float64" else torch.float32
    return Context(layout, rank, groups, control, comm.device(), dtype, node_share, shares)


def shares_node_memory(cfg) -> bool:
    """A silo run on CPU keeps one copy per node of what a party's ranks hold identically (run.share_node_memory);
    the cross-device trainers train other clients each round and keep their own."""
    return cfg.run.share_node_memory and comm.device().type == "cpu" and not cfg.cross_device
