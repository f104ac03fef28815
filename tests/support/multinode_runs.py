"""fedmpi runs across the nodes of tests/support/node_bed.py under plain `mpirun --hostfile` (the documented launcher across
hosts, its daemons started on each node by the bed's rsh agent): the tiny 3-party run the multi-node tests share,
how to launch it with a given rank -> node map, and what its output and log say."""
from __future__ import annotations

import copy
import os
import re
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from jobs.mpirun import ROOT, mpi_env, mpirun_binary
from mpi_scripts import ckpt_common

ROUNDS = 8
COLLECTIVE_TIMEOUT_S = 10   # the least run.collective_timeout_s allows
# ckpt_common's tiny deterministic run with the 3-party setting at 2/1/1 ranks (server + MS1M 2 + GA 1 + VGG 1):
# a model of a few thousand weights, a checkpoint every 2 rounds
CONFIG = copy.deepcopy(ckpt_common.CONFIG)
CONFIG["parties"] = [{"name": name, "ranks": ranks, "data": {"kind": "synthetic", "style": name, "identities": ids,
                                                               "images_per_identity": 4}}
                     for name, ranks, ids in (("ms1m", 2, 8), ("ga", 1, 6), ("vgg", 1, 6))]
CONFIG["optim"]["steps_per_epoch"] = 2 * ROUNDS
CONFIG.update(fv={"enabled": False}, eval={"every": 0}, checkpoint={"every": 2, "keep": 4},
              run={"deterministic": True, "collective_timeout_s": COLLECTIVE_TIMEOUT_S})
WORLD = 1 + sum(p["ranks"] for p in CONFIG["parties"])
# The sbatch script's placement at 2 slots per node: MS1M on the first node, GA + VGG on the second, the server
# on the third (jobs.placement.place with capacities 2, 2, 1).
PARTY_NODES = {"ms1m": 0, "ga": 1, "vgg": 1, "server": 2}


def hosts_per_rank(nodes: list[str]) -> list[str]:
    """The node of each world rank for the script's placement over `nodes` (first, second, third)."""
    order = ["server"] + [p["name"] for p in CONFIG["parties"] for _ in range(p["ranks"])]
    return [nodes[PARTY_NODES[role]] for role in order]


@dataclass
class Workspace:
    base: Path

    @property
    def config(self) -> Path:
        return self.base / "config.yaml"

    def folder(self, name: str) -> Path:
        return self.base / "runs" / name

    def args(self, name: str, *extra: str) -> list[str]:
        return ["-m", "fedmpi.run", "--config", str(self.config), f"log.dir={self.base / 'runs'}",
                f"log.name={name}", f"data.root={self.base / 'data'}", *extra]


def workspace(base: Path) -> Workspace:
    base.mkdir(parents=True, exist_ok=True)
    (base / "config.yaml").write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    return Workspace(base)


class Launch:
    """`mpirun --hostfile` of fedmpi.run over the bed, started from the machine beside the bridge; stdout and stderr
    merged, read line by line with a bound."""

    def __init__(self, bed, ws: Workspace, name: str, hosts: list[str], *extra: str, interface: bool = True,
                 env: dict | None = None):
        self.hostfile = ws.base / f"{name}.hosts"
        self.hostfile.write_text("".join(f"{h}\n" for h in hosts))
        options = bed.mpirun_options(interface)
        cmd = bed.head([mpirun_binary(), "--bind-to", "none", "--oversubscribe", "--hostfile", str(self.hostfile),
                        "--map-by", "seq", *options, "-n", str(len(hosts)),
                        "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS", "-x", "PYTHONUNBUFFERED",
                        sys.executable, *ws.args(name, *extra)])
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=mpi_env(env), cwd=str(ROOT), start_new_session=True)
        self.lines: list[str] = []
        self.started = time.monotonic()

    def _next_line(self, deadline: float) -> str | None:
        """The next output line (kept in `lines`), or None at the end of the output or past the deadline."""
        ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            return None
        self.lines.append(line.rstrip("\n"))
        return line

    def wait_for_line(self, pattern: str, timeout: float) -> str:
        """The first output line matching `pattern`; AssertionError (with the output) past `timeout` or at exit."""
        deadline = time.monotonic() + timeout
        for line in self.lines:
            if re.search(pattern, line):
                return line
        while (line := self._next_line(deadline)) is not None:
            if re.search(pattern, line):
                return line
        raise AssertionError(f"no line matching {pattern!r} within {timeout:.0f} s:\n{self.output[-4000:]}")

    def wait(self, timeout: float) -> int:
        """mpirun's exit status, reading the rest of the output; kills mpirun and raises past `timeout`."""
        deadline = time.monotonic() + timeout
        while self._next_line(deadline) is not None:
            pass
        if time.monotonic() < deadline:
            return self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        self.kill()
        raise AssertionError(f"mpirun still running after {timeout:.0f} s:\n{self.output[-4000:]}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(timeout=10)

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


def error_lines(output: str) -> list[str]:
    """fedmpi's own error lines (`error: ...`, `rank R (role): ...`)."""
    lines = [line.strip() for line in output.splitlines()]
    return [line for line in lines if line.startswith("error: ") or re.match(r"rank \d+ \(", line)]
