"""What every role needs to start: the config, the layout, this rank's place in it, the process groups,
and the backbone's flat-state layout. Built once per rank by `fedmpi.run`."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from fedmpi import comm
from fedmpi.config import Config
from fedmpi.comm.topology import SERVER, Layout


@dataclass
class Groups:
    """torch.distributed groups (None where this rank is not a member or the group would be trivial)."""
    party: object | None          # this trainer's party (gradient average, sharded classifier, intra-party bcast)
    leaders: object | None        # server + party leaders (gather of theta_i, broadcast of Theta)
    validators: object | None     # server + dedicated validators (FV candidates)


@dataclass
class Context:
    cfg: Config
    layout: Layout
    rank: int
    groups: Groups
    mpi_fed: object               # MPI communicator over server + trainers (stats, control)
    device: torch.device
    dtype: torch.dtype

    @property
    def role(self) -> str:
        return self.layout.role(self.rank)


def make_groups(layout: Layout, rank: int) -> Groups:
    """Create every group on every rank in the same order (torch.distributed requires it)."""
    party_group = None
    for party in layout.parties:
        if len(party.ranks) > 1:
            g = comm.new_group(party.ranks)
            if rank in party.ranks:
                party_group = g
    leaders = comm.new_group([SERVER] + [p.leader for p in layout.parties])
    validators = comm.new_group([SERVER, *layout.validators]) if layout.validators else None
    is_leader = rank == SERVER or any(rank == p.leader for p in layout.parties)
    return Groups(party=party_group, leaders=leaders if is_leader else None,
                  validators=validators if (rank == SERVER or rank in layout.validators) else None)


def build_context(cfg: Config, layout: Layout) -> Context:
    mpi = comm.mpi_comm()
    rank = mpi.Get_rank()
    backend = {"auto": None, "cpu": "gloo", "cuda": "nccl"}[cfg.run.device]
    comm.init_torch_distributed(backend, timeout_s=cfg.run.collective_timeout_s)
    groups = make_groups(layout, rank)
    in_fed = rank not in layout.validators
    mpi_fed = mpi.Split(0 if in_fed else 1, key=rank)
    dtype = torch.float64 if cfg.run.dtype == "float64" else torch.float32
    return Context(cfg, layout, rank, groups, mpi_fed, comm.device(), dtype)


# ---------------------------------------------------------------- the backbone and its flat state


def build_backbone(cfg: Config, device, dtype) -> torch.nn.Module:
    """The shared model f(Theta), initialised identically on every rank from run.seed."""
    from fedmpi.models.iresnet import iresnet

    torch.manual_seed(cfg.run.seed)
    m = cfg.model
    net = iresnet(m.backbone, embedding_size=m.embedding_size, input_size=cfg.data.image_size,
                  width=m.width, dropout=m.dropout)
    return net.to(device=device, dtype=dtype)


class BackboneState:
    """The backbone's state as one flat buffer: [trainable params | frozen params | float buffers].

    Trainable parameters come first so that momentum-style state (PFM's M, FedAvgM's v) covers a prefix.
    """

    def __init__(self, backbone: torch.nn.Module):
        params = list(backbone.parameters())
        self.trainable = [p for p in params if p.requires_grad]
        frozen = [p for p in params if not p.requires_grad]
        buffers = [b for b in backbone.buffers() if b.is_floating_point()]
        self.tensors = self.trainable + frozen + buffers
        self.n_trainable = sum(p.numel() for p in self.trainable)
        self.numel = sum(t.numel() for t in self.tensors)

    def read(self, out: torch.Tensor | None = None) -> torch.Tensor:
        return comm.flatten(self.tensors, out)

    def write(self, flat: torch.Tensor) -> None:
        comm.unflatten_into(flat, self.tensors)

    def nbytes(self) -> int:
        return self.numel * self.tensors[0].element_size()


def initial_weights(cfg: Config, layout: Layout) -> torch.Tensor:
    """w at the start: uniform, or proportional to each party's batch (ranks x batch size)."""
    sizes = torch.tensor([len(p.ranks) for p in layout.parties], dtype=torch.float64)
    w = torch.ones_like(sizes) if cfg.fed.weighting == "uniform" else sizes
    return w / w.sum()


def drive(role, ctx: Context, run_dir, resume) -> int:
    """Run a Server or Trainer: take its state from the checkpoint to resume (if any), run its rounds with the
    checkpointer, and meet every other rank at the closing barrier. Returns the exit status (75: preempted)."""
    from fedmpi.roles import signals
    from fedmpi.store.checkpoint import Checkpointer, checkpoint_dir

    start = role.load_checkpoint(resume.folder) if resume else 0
    checkpointer = Checkpointer(ctx.mpi_fed, checkpoint_dir(ctx.cfg, run_dir), ctx.cfg, ctx.layout, signals.agree)
    code = role.run(start, checkpointer)
    comm.barrier(what="closing barrier (every rank)", timeout_s=ctx.cfg.run.collective_timeout_s)
    return code
