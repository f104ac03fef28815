"""The backbone exchange of a round, as flat buffers over torch.distributed.

Up:   party leaders -> server, a gather over the leaders group (the server needs each theta_i for FV).
Down: server -> leaders (broadcast over the leaders group), then leader -> its party's ranks (broadcast over
      the party group, which stays inside the party's nodes).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from fedmpi.comm import group_label, naming_failures
from fedmpi.roles.context import Context
from fedmpi.topology import SERVER, Party


def send_local(ctx: Context, theta_local: torch.Tensor) -> None:
    with naming_failures(f"gather of theta_i over {group_label('leaders', ctx.groups.leaders)}"):
        dist.gather(theta_local, None, dst=SERVER, group=ctx.groups.leaders)


def gather_locals(ctx: Context, theta: torch.Tensor, out: list[torch.Tensor]) -> list[torch.Tensor]:
    """On the server: theta_i of every party, in party order (out[0] receives the server's own dummy)."""
    with naming_failures(f"gather of theta_i over {group_label('leaders', ctx.groups.leaders)}"):
        dist.gather(theta, out, dst=SERVER, group=ctx.groups.leaders)
    return out[1:]


def broadcast_global(ctx: Context, theta: torch.Tensor) -> None:
    with naming_failures(f"broadcast of Theta over {group_label('leaders', ctx.groups.leaders)}"):
        dist.broadcast(theta, src=SERVER, group=ctx.groups.leaders)


def receive_global(ctx: Context, party: Party, theta: torch.Tensor) -> None:
    if ctx.rank == party.leader:
        broadcast_global(ctx, theta)
    if ctx.groups.party is not None:
        with naming_failures(f"broadcast of Theta over {group_label(party.name, ctx.groups.party)}"):
            dist.broadcast(theta, src=party.leader, group=ctx.groups.party)


def round_statistics(r: int) -> str:
    """What the server's per-round gather of the trainers' statistics is called in a timeout message."""
    return f"round {r + 1} statistics (gather over server + trainers)"


def weighted_average(thetas: list[torch.Tensor], w: torch.Tensor) -> torch.Tensor:
    """sum_i w_i theta_i (eq. 4)."""
    out = torch.zeros_like(thetas[0])
    for theta, wi in zip(thetas, w.tolist()):
        out.add_(theta, alpha=wi)
    return out
