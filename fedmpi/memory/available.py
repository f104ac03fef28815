"""What a node (and a GPU) has for a run: the kernel's MemAvailable, lowered to what the job's cgroup still
allows where it sets a limit (Slurm's cgroup plugin, containers); a GPU's free memory from torch.cuda.
FEDMPI_MEMORY_AVAILABLE=BYTES (a number, or with a K/M/G/T suffix) stands in for the node's figure: to leave
headroom for something else on the node, or for tests."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

AVAILABLE_ENV = "FEDMPI_MEMORY_AVAILABLE"
SUFFIXES = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}
CGROUP = Path("/sys/fs/cgroup")


def parse_bytes(text: str, what: str = AVAILABLE_ENV) -> int:
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = value[-1:] if value[-1:] in SUFFIXES else ""
    try:
        number = float(value[:-1] if unit else value)
    except ValueError:
        raise ValueError(f"{what}={text!r}: expected bytes, e.g. 24000000000 or 22G") from None
    if not number >= 0:
        raise ValueError(f"{what}={text!r}: must be >= 0")
    return int(number * SUFFIXES[unit])


def meminfo_available(path: Path = Path("/proc/meminfo")) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None   # "max": no limit


def cgroup_room(root: Path = CGROUP, self_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """What this process's cgroup still allows (limit minus usage), None where it sets no limit: cgroup v2's
    memory.max, or v1's memory.limit_in_bytes."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        rel = path.lstrip("/")
        if hierarchy == "0" and controllers == "":                     # v2
            limit, usage = _read_int(root / rel / "memory.max"), _read_int(root / rel / "memory.current")
        elif "memory" in controllers.split(","):                          # v1
            limit = _read_int(root / "memory" / rel / "memory.limit_in_bytes")
            usage = _read_int(root / "memory" / rel / "memory.usage_in_bytes")
            if limit is not None and limit >= 1 << 60:                    # v1's "no limit"
                limit = None
        else:
            continue
        if limit is not None:
            return max(limit - (usage or 0), 0)
    return None


def node_available() -> int | None:
    """This node's memory for the job (bytes): FEDMPI_MEMORY_AVAILABLE, else the smaller of MemAvailable and the
    cgroup's room; None where neither can be read."""
    explicit = os.environ.get(AVAILABLE_ENV)
    if explicit:
        return parse_bytes(explicit)
    figures = [x for x in (meminfo_available(), cgroup_room()) if x is not None]
    return min(figures) if figures else None


def torch_build() -> str:
    """'cuda' or 'cpu': which torch build is installed, read from its files (torch is not imported)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return "cpu"
    lib = Path(list(spec.submodule_search_locations)[0]) / "lib"
    return "cuda" if any(lib.glob("libtorch_cuda*")) or any(lib.glob("libc10_cuda*")) else "cpu"


def gpu_present(dev: Path = Path("/dev")) -> bool:
    """Whether this rank can see an NVIDIA GPU (without importing torch): the node has one and CUDA_VISIBLE_DEVICES
    does not hide them all (empty, or a first entry CUDA cannot take, such as -1: CUDA then shows no device, and
    torch.cuda.is_available() is False)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and (not visible.strip() or visible.split(",")[0].strip().startswith("-")):
        return False
    return (dev / "nvidiactl").exists() or any(dev.glob("nvidia[0-9]*"))


def own_gpu_free(local_rank: int) -> tuple[int, int, int]:
    """(visible GPUs, the one this rank will run on, its free bytes) from torch.cuda.mem_get_info. Imports torch
    and opens this rank's CUDA context on its own GPU (as its run would next), so only where a GPU runs."""
    import torch

    count = torch.cuda.device_count()
    if count == 0:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise RuntimeError("run.device=cuda, but this rank sees no GPU"
                           + (f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""))
    index = local_rank % count
    return count, index, int(torch.cuda.mem_get_info(index)[0])
