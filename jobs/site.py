"""Site settings for launching on a cluster: environment variables FEDMPI_*, or the file slurm/site.env
(shell assignments, the same file slurm/lib.sh sources); a variable set in the environment wins over the
file. See slurm/site.env.example for every setting."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Site:
    cpu: bool = False                 # FEDMPI_CPU=1: no GPUs (gloo), task slots only
    gpus_per_node: int = 8            # FEDMPI_GPUS_PER_NODE
    ranks_per_node: int = 0           # FEDMPI_RANKS_PER_NODE (CPU mode; 0: all ranks on one node)
    cpus_per_task: int = 0            # FEDMPI_CPUS_PER_TASK (0: Slurm's default)
    partition: str = ""               # FEDMPI_PARTITION
    account: str = ""                 # FEDMPI_ACCOUNT
    qos: str = ""                     # FEDMPI_QOS
    time: str = ""                    # FEDMPI_TIME (sbatch --time syntax)
    python: str = ""                  # FEDMPI_PYTHON, else FEDMPI_VENV/bin/python, else this interpreter
    modules: str = ""                 # FEDMPI_MODULES: `module load` these in the job
    setup: str = ""                   # FEDMPI_SETUP: one shell line run first in the job
    nccl_ifname: str = ""             # FEDMPI_NCCL_IFNAME -> NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME
    srun_mpi: str = "pmix"            # FEDMPI_SRUN_MPI: srun --mpi=...

    @property
    def slots_per_node(self) -> int:
        return self.ranks_per_node if self.cpu else self.gpus_per_node

    def setup_lines(self) -> list[str]:
        """Shell lines for the job script: site setup, modules, the ranks' environment."""
        lines = []
        if self.setup:
            lines.append(self.setup)
        if self.modules:
            lines.append(f"module load {self.modules}")
        lines += [f"export PYTHONPATH={shlex.quote(str(ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}",
                  "export PYTHONUNBUFFERED=1",
                  "export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}"]
        if self.nccl_ifname:
            quoted = shlex.quote(self.nccl_ifname)
            lines.append(f"export NCCL_SOCKET_IFNAME={quoted} GLOO_SOCKET_IFNAME={quoted}")
        return lines


def _site_file_values(path: Path) -> dict[str, str]:
    """The variables a site file assigns, as bash reads it."""
    out = subprocess.run(["bash", "-c", 'set -a; source "$1" >/dev/null || exit 3; env -0', "_", str(path)],
                         capture_output=True, timeout=30, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    if out.returncode != 0:
        raise ValueError(f"site file {path}: bash could not read it: {out.stderr.decode(errors='replace').strip()}")
    values = {}
    for item in out.stdout.split(b"\0"):
        key, sep, value = item.decode(errors="replace").partition("=")
        if sep and key.startswith(("FEDMPI_", "NCCL_", "GLOO_")):
            values[key] = value
    return values


def _int(values: dict, key: str, default: int) -> int:
    text = values.get(key, "")
    if text == "":
        return default
    try:
        number = int(text)
    except ValueError:
        raise ValueError(f"{key}={text!r}: must be a whole number") from None
    if number < 0:
        raise ValueError(f"{key}={text!r}: must be >= 0")
    return number


def load_site(environ: dict | None = None) -> Site:
    environ = dict(os.environ if environ is None else environ)
    site_file = environ.get("FEDMPI_SITE_FILE")
    path = Path(site_file) if site_file else ROOT / "slurm" / "site.env"
    if site_file and not path.is_file():
        raise ValueError(f"FEDMPI_SITE_FILE={site_file}: no such file")
    values = _site_file_values(path) if path.is_file() else {}
    values.update({k: v for k, v in environ.items() if k.startswith("FEDMPI_")})
    cpu = values.get("FEDMPI_CPU", "0")
    if cpu not in ("0", "1"):
        raise ValueError(f"FEDMPI_CPU={cpu!r}: must be 0 or 1")
    gpus = _int(values, "FEDMPI_GPUS_PER_NODE", 8)
    if gpus == 0:
        raise ValueError("FEDMPI_GPUS_PER_NODE=0: must be a count > 0")
    python = values.get("FEDMPI_PYTHON") or (
        str(Path(values["FEDMPI_VENV"]) / "bin" / "python") if values.get("FEDMPI_VENV") else sys.executable)
    return Site(cpu=cpu == "1", gpus_per_node=gpus, ranks_per_node=_int(values, "FEDMPI_RANKS_PER_NODE", 0),
                cpus_per_task=_int(values, "FEDMPI_CPUS_PER_TASK", 0), partition=values.get("FEDMPI_PARTITION", ""),
                account=values.get("FEDMPI_ACCOUNT", ""), qos=values.get("FEDMPI_QOS", ""),
                time=values.get("FEDMPI_TIME", ""), python=python, modules=values.get("FEDMPI_MODULES", ""),
                setup=values.get("FEDMPI_SETUP", ""), nccl_ifname=values.get("FEDMPI_NCCL_IFNAME", ""),
                srun_mpi=values.get("FEDMPI_SRUN_MPI", "pmix"))
