"""Several hosts on this one machine for the multi-node tests: each node is a Linux network namespace with its own
UTS hostname, joined to a bridge by one veth (its `eth0`), and a mount namespace of its own in which its
/etc/hosts and its scratch folder (Slurm's TmpFS, where PMIx makes its per-step folders) are private bind mounts.
A holder process (`sleep`) keeps a node's UTS and mount namespaces; everything runs on a node through
`nsenter -t HOLDER --net --uts --mount` (never `ip netns exec`, which remounts /sys: slurmd's cgroup plugin then
fails).

What the bed makes carries its tag (`fmb` + 4 hex digits): the bridge `fmbTAG`, the namespaces `fmbTAG-nI`, the
host side of each veth `fmbTAGnI`, the folder /tmp/fedmpi-bed-TAG. `stop()` kills every process in the nodes'
namespaces, then removes all of it; a bed whose owner died without stopping it (SIGKILL, a killed session) is
removed by the next bed's start (`sweep_stale`). Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN): `missing_reason()`
says why not where it cannot run.
"""
from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "fmb"
FOLDER_PREFIX = "fedmpi-bed-"
COMMAND_TIMEOUT_S = 20.0
KILL_TIMEOUT_S = 10.0


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if check and out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {out.stderr.strip()}")
    return out


def missing_reason() -> str | None:
    """Why this machine cannot hold the bed (not root, namespaces refused, tools missing), or None."""
    for tool in ("ip", "nsenter", "unshare"):
        if not shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"):
            return f"the multi-node bed needs `{tool}` (util-linux, iproute2)"
    if os.geteuid() != 0:
        return "the multi-node bed needs root (network namespaces, veths, a bridge)"
    probe = f"{PREFIX}probe{os.getpid() % 10000}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"network namespaces are refused here: ip netns add: {made.stderr.strip()}"
    try:
        link = _ip("link", "add", probe[:15], "type", "bridge", check=False)
        if link.returncode != 0:
            return f"bridges are refused here (no CAP_NET_ADMIN?): ip link add: {link.stderr.strip()}"
        _ip("link", "del", probe[:15], check=False)
        uts = subprocess.run(["unshare", "--uts", "--mount", "true"], capture_output=True, text=True,
                             timeout=COMMAND_TIMEOUT_S)
        if uts.returncode != 0:
            return f"UTS/mount namespaces are refused here: unshare: {uts.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def _netns_inode(name: str) -> int | None:
    try:
        return os.stat(f"/run/netns/{name}").st_ino
    except OSError:
        return None


def pids_in_netns(inode: int) -> list[int]:
    """Every process whose network namespace is the one with this inode."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}/ns/net").st_ino == inode:
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def _kill_all(pids: list[int], sig: int = signal.SIGKILL) -> None:
    """Signal every process; the session folder of an Open MPI daemon killed here (/tmp/prted.PID, which only
    the daemon itself would remove) goes with it."""
    daemons = []
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "prted":
                daemons.append(pid)
        except OSError:
            pass
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    if sig == signal.SIGKILL:
        for pid in daemons:
            shutil.rmtree(Path(tempfile.gettempdir()) / f"prted.{pid}", ignore_errors=True)


@dataclass
class Node:
    name: str            # its hostname (UTS) and its name in the hosts files, the hostfile and slurm.conf
    index: int
    address: str         # eth0's address on the bridge
    netns: str
    veth: str            # the host side of its link (its statistics are the link's traffic)
    hosts_file: Path     # bind-mounted over this node's /etc/hosts
    scratch: Path        # bind-mounted over the bed's shared scratch path on this node
    holder: subprocess.Popen | None = None

    def enter(self, argv: list[str], wd: str | os.PathLike | None = None) -> list[str]:
        """argv run inside this node (its network, hostname and mounts), in folder `wd` (default: this one)."""
        return ["nsenter", "-t", str(self.holder.pid), "--net", "--uts", "--mount",
                f"--wd={wd or os.getcwd()}", "--", *argv]

    def pids(self) -> list[int]:
        """The processes running on this node (its holder included)."""
        inode = _netns_inode(self.netns)
        return pids_in_netns(inode) if inode is not None else []

    def link_bytes(self) -> dict[str, int]:
        """Bytes on this node's link so far: `out` sent by the node, `in` received by it (the host side's
        rx and tx)."""
        stats = Path("/sys/class/net") / self.veth / "statistics"
        return {"out": int((stats / "rx_bytes").read_text()), "in": int((stats / "tx_bytes").read_text())}

    def set_link(self, up: bool) -> None:
        _ip("link", "set", self.veth, "up" if up else "down")


@dataclass
class NodeBed:
    names: tuple[str, ...]
    tag: str = field(default_factory=lambda: f"{random.randrange(16 ** 4):04x}")
    nodes: dict[str, Node] = field(default_factory=dict)
    root: Path | None = None
    started_s: float = 0.0

    @property
    def bridge(self) -> str:
        return f"{PREFIX}{self.tag}"

    @property
    def subnet(self) -> str:
        return f"{self.prefix}.0/24"

    @property
    def prefix(self) -> str:
        return f"10.231.{int(self.tag, 16) % 250 + 1}"

    @property
    def gateway(self) -> str:
        """The machine's own address on the bridge (where slurmctld and mpirun are reached)."""
        return f"{self.prefix}.1"

    @property
    def scratch(self) -> Path:
        """The same path on every node, a different folder behind it on each (Slurm's TmpFS)."""
        return self.root / "scratch"

    @property
    def agent(self) -> Path:
        """Open MPI's rsh agent: `agent [options] NODE COMMAND...` runs COMMAND on NODE."""
        return self.root / "agent"

    # ------------------------------------------------------------------ start / stop

    def start(self) -> "NodeBed":
        t0 = time.monotonic()
        sweep_stale()
        self.root = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{self.tag}-", dir="/tmp"))
        (self.root / "owner").write_text(str(os.getpid()))
        self.scratch.mkdir()
        (self.root / "holders").mkdir()
        for i, name in enumerate(self.names, start=1):
            self.nodes[name] = Node(name=name, index=i, address=f"{self.prefix}.{10 + i}",
                                    netns=f"{PREFIX}{self.tag}-n{i}", veth=f"{PREFIX}{self.tag}n{i}",
                                    hosts_file=self.root / f"hosts.{name}", scratch=self.root / f"scratch.{name}")
        hosts = self.hosts_text()
        (self.root / "hosts").write_text(hosts)
        # Names on the bed come from /etc/hosts alone: no DNS server answers inside the nodes, and a lookup sent to
        # one that cannot be reached fails with EAI_AGAIN instead of "not found" (torch's store then warned "The
        # hostname of the client socket cannot be retrieved" for every connection).
        (self.root / "nsswitch.conf").write_text(re.sub(r"(?m)^hosts:.*$", "hosts: files",
                                                        Path("/etc/nsswitch.conf").read_text()))
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for node in self.nodes.values():
            node.hosts_file.write_text(hosts)
            node.scratch.mkdir()
            _ip("netns", "add", node.netns)
            _ip("link", "add", node.veth, "type", "veth", "peer", "name", "eth0", "netns", node.netns)
            _ip("link", "set", node.veth, "master", self.bridge, "up")
            _ip("-n", node.netns, "addr", "add", f"{node.address}/24", "dev", "eth0")
            _ip("-n", node.netns, "link", "set", "eth0", "up")
            _ip("-n", node.netns, "link", "set", "lo", "up")
            self._start_holder(node)
        self._write_agent()
        self.started_s = time.monotonic() - t0
        return self

    def hosts_text(self, without: tuple[str, ...] = ()) -> str:
        lines = ["127.0.0.1 localhost", f"{self.gateway} {socket.gethostname()}"]
        lines += [f"{n.address} {n.name}" for n in self.nodes.values() if n.name not in without]
        return "\n".join(lines) + "\n"

    def _start_holder(self, node: Node) -> None:
        ready = self.root / "holders" / f"{node.name}.ready"
        setup = (f"hostname {node.name} && mount --bind {node.hosts_file} /etc/hosts && "
                 f"mount --bind {self.root / 'nsswitch.conf'} /etc/nsswitch.conf && "
                 f"mount --bind {node.scratch} {self.scratch} && touch {ready} && exec sleep infinity")
        node.holder = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{node.netns}", "--", "unshare", "--uts", "--mount",
             "--propagation", "private", "--", "/bin/sh", "-c", setup],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        while not ready.exists():
            if node.holder.poll() is not None:
                raise RuntimeError(f"node {node.name} did not start: {node.holder.stderr.read().decode().strip()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {node.name} did not start within {COMMAND_TIMEOUT_S:.0f} s")
            time.sleep(0.02)
        (self.root / "holders" / f"{node.name}.pid").write_text(str(node.holder.pid))

    def _write_agent(self) -> None:
        self.agent.write_text(f"""#!/bin/sh
# Open MPI's rsh agent on the bed: skips ssh-style options, then runs the command line on the node's namespaces.
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
node=$1; shift
pid=$(cat "{self.root}/holders/$node.pid" 2>/dev/null) || {{ echo "bed agent: no node $node" >&2; exit 255; }}
# Not exec: like ssh, the agent stays on this side, and ends with 255 (ssh's "connection lost") when what runs on
# the node is killed, e.g. when the test kills every process of the node.
nsenter -t "$pid" --net --uts --mount --wd="$PWD" -- /bin/sh -c "$*"
status=$?
[ "$status" -gt 128 ] && exit 255
exit "$status"
""")
        self.agent.chmod(0o755)

    def stop(self) -> None:
        """Kill everything on the nodes, remove the namespaces, links, bridge and folder (idempotent)."""
        teardown(self.tag)
        self.nodes.clear()

    def __enter__(self) -> "NodeBed":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ running things

    def head(self, argv: list[str]) -> list[str]:
        """argv run on the machine itself (beside the bridge) with the bed's names in its /etc/hosts."""
        return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                f'mount --bind {self.root / "hosts"} /etc/hosts && '
                f'mount --bind {self.root / "nsswitch.conf"} /etc/nsswitch.conf && exec "$@"', "bed-head", *argv]

    def mpirun_options(self, interface: bool = True) -> list[str]:
        """Open MPI 5's options for a run across the nodes: the agent, the bed's subnet for PRRTE's daemons and
        (`interface`) eth0 for MPI's TCP traffic, which fedmpi then gives gloo too."""
        options = ["--prtemca", "plm_ssh_agent", str(self.agent), "--prtemca", "oob_tcp_if_include", self.subnet,
                   "--prtemca", "oob_tcp_keepalive_time", "5", "--prtemca", "oob_tcp_keepalive_intvl", "2",
                   "--prtemca", "oob_tcp_keepalive_probes", "3"]
        return options + (["--mca", "btl_tcp_if_include", "eth0"] if interface else [])

    def processes(self) -> dict[str, list[int]]:
        return {name: node.pids() for name, node in self.nodes.items()}

    def link_bytes(self) -> dict[str, dict[str, int]]:
        return {name: node.link_bytes() for name, node in self.nodes.items()}


# ---------------------------------------------------------------- removal (also of beds whose owner died)


def _links_of(tag: str) -> list[str]:
    out = _ip("-o", "link", "show", check=False).stdout
    names = [m.group(1) for m in re.finditer(r"^\d+: ([^:@\s]+)", out, re.M)]
    return [n for n in names if n.startswith(f"{PREFIX}{tag}")]


def _netns_of(tag: str) -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"{PREFIX}{tag}-")]


def _folders_of(tag: str) -> list[Path]:
    return sorted(Path("/tmp").glob(f"{FOLDER_PREFIX}{tag}-*"))


def leftovers(tag: str) -> list[str]:
    """What of the bed `tag` still exists: namespaces, links, processes in them, folders."""
    found = [f"netns {n}" for n in _netns_of(tag)] + [f"link {n}" for n in _links_of(tag)]
    for ns in _netns_of(tag):
        inode = _netns_inode(ns)
        found += [f"process {pid} in {ns}" for pid in (pids_in_netns(inode) if inode else [])]
    found += [f"folder {p}" for p in _folders_of(tag)]
    return found


def teardown(tag: str) -> None:
    """Remove the bed `tag`: SIGKILL every process in its namespaces (and wait for them), then the namespaces
    (their veth ends go with them), the bridge and any link left, the folder."""
    for ns in _netns_of(tag):
        inode = _netns_inode(ns)
        if inode is None:
            continue
        deadline = time.monotonic() + KILL_TIMEOUT_S
        while (pids := pids_in_netns(inode)) and time.monotonic() < deadline:
            _kill_all(pids)
            time.sleep(0.05)
    for ns in _netns_of(tag):
        _ip("netns", "del", ns, check=False)
    for link in _links_of(tag):
        _ip("link", "del", link, check=False)
    for folder in _folders_of(tag):
        # the holders' bind mounts were in their own mount namespaces, gone with them: a plain folder now
        shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale() -> list[str]:
    """Remove every bed whose owner process is gone (a session killed before its clean-up); the tags removed."""
    tags = set()
    for ns in _ip("netns", "list", check=False).stdout.split():
        if re.fullmatch(rf"{PREFIX}[0-9a-f]{{4}}-n\d+", ns):
            tags.add(ns[len(PREFIX):len(PREFIX) + 4])
    for folder in Path("/tmp").glob(f"{FOLDER_PREFIX}*"):
        m = re.match(rf"{FOLDER_PREFIX}([0-9a-f]{{4}})-", folder.name)
        if m:
            tags.add(m.group(1))
    removed = []
    for tag in sorted(tags):
        owners = []
        for folder in _folders_of(tag):
            try:
                owners.append(int((folder / "owner").read_text()))
            except (OSError, ValueError):
                pass
        if not any(_alive(pid) for pid in owners):
            teardown(tag)
            removed.append(tag)
    return removed


if __name__ == "__main__":  # `python tests/support/node_bed.py sweep`: remove beds left by killed sessions
    if sys.argv[1:] == ["sweep"]:
        print("removed:", sweep_stale() or "nothing")
