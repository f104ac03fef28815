"""Where every rank runs: its node (hostname), its node-local rank (the index that selects its GPU) and the address
its rendezvous and gloo traffic use, gathered once at launch over MPI (`survey`). Messages name ranks with their
nodes from here (`describe_ranks`), the run log records the placement, and the checks that a multi-node run needs
before torch.distributed starts are made here, each ending in one line that names the node: a hostname that does
not resolve, or one that resolves to loopback while the job spans nodes. No torch here."""
from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct
from dataclasses import dataclass

from fedmpi.errors import ConfigError

SIOCGIFADDR = 0x8915


@dataclass(frozen=True)
class RankPlace:
    rank: int
    node: str
    local_rank: int
    address: str | None    # what this rank's gloo binds and, on rank 0, where the rendezvous listens
    problem: str | None    # why `address` could not be found (a one-line reason), else None

    def as_dict(self) -> dict:
        return {"rank": self.rank, "node": self.node, "local_rank": self.local_rank, "address": self.address}


_PLACES: list[RankPlace] = []


def local_rank(comm=None) -> int:
    """Rank among the processes on this node (MPI shared-memory split)."""
    from mpi4py import MPI

    comm = comm or MPI.COMM_WORLD
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    rank = node.Get_rank()
    node.Free()
    return rank


def mpi_interface() -> str | None:
    """The network interface Open MPI was told to use (one name in OMPI_MCA_btl_tcp_if_include), if any."""
    names = os.environ.get("OMPI_MCA_btl_tcp_if_include", "").split(",")
    return names[0] if len(names) == 1 and names[0] and "/" not in names[0] else None


def use_mpi_interface() -> None:
    """gloo and NCCL open their sockets on MPI's interface when one is known (unless told otherwise): torch's
    rendezvous store and gloo have no authentication, so they should not face other networks."""
    interface = mpi_interface()
    if interface:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", interface)


def socket_interface() -> str | None:
    """The interface gloo is told to use (GLOO_SOCKET_IFNAME, the first of a list), if any."""
    names = [n for n in os.environ.get("GLOO_SOCKET_IFNAME", "").split(",") if n]
    return names[0] if names else None


def interface_address(name: str) -> str | None:
    """The IPv4 address of a network interface of this node, or None where it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def own_address() -> tuple[str | None, str | None]:
    """(address, problem) of this rank: the address of GLOO_SOCKET_IFNAME's interface when one is set (then the
    hostname need not resolve), else what the node's hostname resolves to, as gloo does."""
    node = socket.gethostname()
    interface = socket_interface()
    if interface:
        address = interface_address(interface)
        if address is None:
            return None, f"GLOO_SOCKET_IFNAME={interface}: node {node} has no interface {interface} with an IPv4 address"
        return address, None
    try:
        return socket.getaddrinfo(node, None, socket.AF_INET)[0][4][0], None
    except socket.gaierror as exc:
        return None, (f"the hostname of node {node} does not resolve ({exc.strerror}): add it to that node's "
                      f"/etc/hosts or DNS, or set GLOO_SOCKET_IFNAME (or OMPI_MCA_btl_tcp_if_include) to the "
                      f"interface between the nodes")


def is_loopback(address: str | None) -> bool:
    return address is not None and ipaddress.ip_address(address).is_loopback


def survey(mpi) -> list[RankPlace]:
    """Every rank's place, on every rank (a collective of MPI_COMM_WORLD). When the job spans nodes, ConfigError
    (one line naming each node) for ranks without a usable address, or whose address is loopback (the other
    nodes could not reach them). On one node neither matters: gloo then falls back to loopback."""
    use_mpi_interface()
    address, problem = own_address()
    mine = RankPlace(mpi.Get_rank(), socket.gethostname(), local_rank(mpi), address, problem)
    places = [RankPlace(*p) for p in mpi.allgather(tuple(mine.__dict__.values()))]
    _PLACES[:] = places
    if len({p.node for p in places}) == 1:
        return places
    problems = sorted({p.problem for p in places if p.problem})
    looped = {p.node: p.address for p in places if is_loopback(p.address)}
    problems += [f"node {node}: its hostname resolves to {address} (loopback), which ranks on the other nodes cannot "
                 f"reach: map it to the node's address in /etc/hosts or DNS, or set GLOO_SOCKET_IFNAME (or "
                 f"OMPI_MCA_btl_tcp_if_include) to the interface between the nodes"
                 for node, address in sorted(looped.items())]
    if problems:   # every node's problem in the one line, so that one look fixes them all
        raise ConfigError("; ".join(problems))
    return places


def places() -> list[RankPlace]:
    """The survey's result (empty before `survey`)."""
    return list(_PLACES)


def node_of(rank: int) -> str | None:
    return _PLACES[rank].node if rank < len(_PLACES) else None


def rendezvous_host() -> str:
    """Where rank 0's store listens, as the others reach it: FEDMPI_RDZV_HOST, else rank 0's surveyed address,
    else (no survey) its hostname."""
    explicit = os.environ.get("FEDMPI_RDZV_HOST")
    if explicit:
        return explicit
    if _PLACES and _PLACES[0].address:
        return _PLACES[0].address
    return socket.gethostname()


def describe_ranks(ranks: list[int]) -> str:
    """'ranks 0, 1, 3' with their nodes when known: 'ranks 0, 1, 3 on vm' (one node) or 'ranks 0 on n3;
    1, 2 on n1' (several), in rank order."""
    label = ("rank " if len(ranks) == 1 else "ranks ")
    if not ranks or any(node_of(r) is None for r in ranks):
        return label + ", ".join(str(r) for r in ranks)
    runs: list[tuple[str, list[int]]] = []
    for r in ranks:
        if runs and runs[-1][0] == node_of(r):
            runs[-1][1].append(r)
        else:
            runs.append((node_of(r), [r]))
    return label + "; ".join(f"{', '.join(map(str, rs))} on {node}" for node, rs in runs)


def node_of_address(address: str) -> str | None:
    """The node whose ranks use `address` (to name the peer a backend error gives as an address)."""
    for p in _PLACES:
        if p.address == address:
            return p.node
    return None
