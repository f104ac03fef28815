"""Where each MPI rank of a run goes: the allocation a layout needs and the host of every rank.

A layout (from `python -m fedmpi.layout`) is rank 0 the server, then each party's trainer ranks in config
order, then dedicated validators. Every rank needs a slot of its own on its node (a GPU in GPU mode, since
NCCL refuses two ranks of one communicator on one device; a task slot in CPU mode). Placement keeps each
party on as few nodes as possible: a party larger than a node takes whole nodes for as much of it as fills
them, and the remaining pieces (and the server with its validators) are packed first-fit-decreasing, a
piece split over nodes only when it fits whole on none. Ranks on a node are in world-rank order, so a
rank's local rank (MPI's shared-memory split, keyed by world rank) is its GPU index on that node.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Group:
    """Ranks that should share a node: one party, or the server with its validators."""
    name: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class Allocation:
    """What to ask Slurm for: `nodes` nodes with `tasks_per_node` task slots (and as many GPUs) each."""
    nodes: int
    tasks_per_node: int
    world: int
    gpus: bool

    def sbatch_options(self) -> list[str]:
        options = [f"--nodes={self.nodes}", f"--ntasks-per-node={self.tasks_per_node}"]
        options.append(f"--gres=gpu:{self.tasks_per_node}" if self.gpus else "--gres=none")
        return options


def groups_of(layout: dict) -> list[Group]:
    """The layout's rank groups in rank order: server (+ dedicated validators), then each party."""
    parties = layout["parties"]
    trainers = sum(parties.values())
    validators = tuple(range(1 + trainers, 1 + trainers + int(layout.get("validators", 0))))
    groups, next_rank = [Group("server", (0,) + validators)], 1
    for name, count in parties.items():
        groups.append(Group(name, tuple(range(next_rank, next_rank + count))))
        next_rank += count
    world = 1 + trainers + len(validators)
    if int(layout.get("world", world)) != world:
        raise ValueError(f"layout: world {layout['world']} does not match server 1 + parties {trainers} "
                         f"+ validators {len(validators)}")
    return groups


def place(layout: dict, capacities: list[int]) -> list[list[int]]:
    """Ranks on each node (world-rank order), for nodes with the given slot counts.

    Raises ValueError naming the need and the offer when the ranks do not fit."""
    groups = groups_of(layout)
    world = sum(len(g.ranks) for g in groups)
    if sum(capacities) < world:
        raise ValueError(f"allocation too small: the layout needs {world} ranks ({describe(layout)}), the "
                         f"nodes offer {sum(capacities)} slots ({', '.join(map(str, capacities))})")
    free = list(capacities)
    nodes: list[list[int]] = [[] for _ in capacities]
    pieces: list[tuple[int, ...]] = []
    for group in groups:
        ranks = group.ranks
        # Whole nodes for the part of a large group that fills them (an empty node of the largest size first).
        while ranks:
            empty = [i for i in range(len(free)) if not nodes[i] and free[i] <= len(ranks)]
            if not empty:
                break
            i = max(empty, key=lambda j: (free[j], -j))
            nodes[i].extend(ranks[:free[i]])
            ranks, free[i] = ranks[free[i]:], 0
        if ranks:
            pieces.append(ranks)
    # First-fit decreasing for the rest; ties keep rank order, the server's piece last (it is the one that
    # may end up on a node of its own, rather than a party's last piece).
    for piece in sorted(pieces, key=lambda p: (-len(p), 0 in p)):
        fits = [i for i in range(len(free)) if free[i] >= len(piece)]
        if fits:
            i = fits[0]
            nodes[i].extend(piece)
            free[i] -= len(piece)
            continue
        remaining = list(piece)
        for i in sorted(range(len(free)), key=lambda j: -free[j]):
            take = remaining[:free[i]]
            nodes[i].extend(take)
            free[i] -= len(take)
            remaining = remaining[len(take):]
            if not remaining:
                break
    return [sorted(n) for n in nodes]


def allocation(layout: dict, slots_per_node: int, gpus: bool) -> Allocation:
    """The smallest uniform allocation (nodes x slots) that holds the layout with its parties kept together."""
    if slots_per_node <= 0:
        raise ValueError(f"slots per node must be > 0, got {slots_per_node}")
    groups = groups_of(layout)
    world = sum(len(g.ranks) for g in groups)
    per_node = min(slots_per_node, world)
    # Enough nodes that no piece is ever split; `place` fills them in order, so the used ones come first.
    ample = -(-world // per_node) + len(groups)
    used = [n for n in place(layout, [per_node] * ample) if n]
    return Allocation(nodes=len(used), tasks_per_node=per_node if len(used) > 1 else world, world=world,
                      gpus=gpus)


def hosts_per_rank(nodes: list[list[int]], hostnames: list[str]) -> list[str]:
    """The host of each world rank, rank order: the lines of Slurm's arbitrary-distribution hostfile."""
    host_of = {}
    for ranks, host in zip(nodes, hostnames):
        for r in ranks:
            host_of[r] = host
    return [host_of[r] for r in range(len(host_of))]


def expand_tasks_per_node(text: str) -> list[int]:
    """Slurm's SLURM_TASKS_PER_NODE ('8(x3),4') as one count per node."""
    counts = []
    for item in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if not match:
            raise ValueError(f"SLURM_TASKS_PER_NODE: cannot read {text!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def describe(layout: dict) -> str:
    parts = " + ".join(f"{name} {n}" for name, n in layout["parties"].items())
    text = f"server 1 + {parts}"
    if layout.get("validators"):
        text += f" + validators {layout['validators']}"
    return text


def describe_nodes(nodes: list[list[int]], layout: dict, hostnames: list[str] | None = None) -> str:
    """One line per used node: its ranks and how many of them each group holds."""
    lines = []
    groups = groups_of(layout)
    for i, ranks in enumerate(nodes):
        if not ranks:
            continue
        held = [f"{g.name} {len(set(g.ranks) & set(ranks))}" for g in groups if set(g.ranks) & set(ranks)]
        host = hostnames[i] if hostnames else f"node {i}"
        lines.append(f"{host}: ranks {_ranges(ranks)} ({', '.join(held)})")
    return "\n".join(lines)


def _ranges(ranks: list[int]) -> str:
    spans, start = [], ranks[0]
    for prev, cur in zip(ranks, ranks[1:] + [None]):
        if cur != prev + 1 if cur is not None else True:
            spans.append(str(start) if start == prev else f"{start}-{prev}")
            start = cur
    return ",".join(spans)


def load_layout(text: str) -> dict:
    layout = json.loads(text)
    if not isinstance(layout, dict) or "parties" not in layout:
        raise ValueError(f"layout: expected the JSON of python -m fedmpi.layout, got {text[:80]!r}")
    return layout


# ------------------------------------------------------------------ command line (used by slurm/lib.sh)


def main(argv: list[str] | None = None) -> int:
    """`sbatch-options`: the allocation a layout needs; `hostfile`: the host of each rank in a job."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m jobs.placement", description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    size = sub.add_parser("sbatch-options", help="print the sbatch options that allocate the layout")
    size.add_argument("--layout", required=True, help="JSON printed by python -m fedmpi.layout")
    size.add_argument("--slots", type=int, required=True, help="GPUs (CPU mode: ranks) per node")
    size.add_argument("--cpu", action="store_true", help="no GPUs: task slots only")
    hosts = sub.add_parser("hostfile", help="print one host per rank, rank order (SLURM_HOSTFILE)")
    hosts.add_argument("--layout", required=True)
    hosts.add_argument("--hosts", required=True, help="the job's hosts, in order, separated by spaces")
    hosts.add_argument("--tasks-per-node", required=True, help="SLURM_TASKS_PER_NODE")
    hosts.add_argument("--max-per-node", type=int, default=0, help="cap per node (GPUs per node)")
    args = parser.parse_args(argv)
    try:
        layout = load_layout(args.layout)
        if args.command == "sbatch-options":
            alloc = allocation(layout, args.slots, gpus=not args.cpu)
            nodes = place(layout, [alloc.tasks_per_node] * alloc.nodes)
            print(describe_nodes(nodes, layout), file=sys.stderr)
            print(" ".join(alloc.sbatch_options()))
            return 0
        names = args.hosts.split()
        counts = expand_tasks_per_node(args.tasks_per_node)
        if len(counts) != len(names):
            raise ValueError(f"{len(names)} hosts but SLURM_TASKS_PER_NODE {args.tasks_per_node!r} "
                             f"describes {len(counts)} nodes")
        if args.max_per_node > 0:
            counts = [min(c, args.max_per_node) for c in counts]
        nodes = place(layout, counts)
        print(describe_nodes(nodes, layout, names), file=sys.stderr)
        print("\n".join(hosts_per_rank(nodes, names)))
        return 0
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
