"""Run `fedmpi.run` as one MPI rank and record where its anonymous memory goes: `python bench/memory_probe.py OUT
-m fedmpi.run ARGS`.

Run by path (bench/memory.py wraps any checkout's fedmpi.run with it). A thread reads the process's anonymous
memory (RssAnon, /proc/self/status) every SAMPLE_S and keeps its peak before and after the role starts its
rounds. The role object (Server or Trainer) is taken where `drive` (fedmpi/core/driver.py) receives it; at that
moment, before the first step, every tensor and array reachable from it is counted once (by storage) under
the part it belongs to: model parameters, optimizer state, classifier shard, kept flat buffers (each by its
attribute path), data; tensors in the memory a party's ranks share on a node (fedmpi/comm/node_share.py) under
`node-shared`, which is not anonymous memory and not in the others. At exit OUT/rank-<R>.json holds the figures (MB):
  torch        anonymous memory after `import torch` (the interpreter included)
  entry        at the start of the rounds;  peak_setup, peak_run  the peaks before and during the rounds
  parts        {part: MB} of the counted tensors;  buffers  {attribute path: MB} of the kept flat buffers
  grads        the trainable parameters' gradients (they exist during each step's backward and update)
Nothing in the wrapped run changes besides the sampling thread.
"""
from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import threading
import time

SAMPLE_S = 0.005
MB = 1024 * 1024


def anon_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Sampler:
    def __init__(self):
        self.peak = {"setup": 0.0, "run": 0.0}
        self.phase = "setup"

    def loop(self) -> None:
        while True:
            value = anon_mb()
            if value > self.peak[self.phase]:
                self.peak[self.phase] = value
            time.sleep(SAMPLE_S)


def nbytes(obj) -> tuple[object, int] | None:
    """(storage key, bytes) of a tensor or numpy array, None for anything else."""
    import numpy as np
    import torch

    if isinstance(obj, torch.Tensor):
        storage = obj.untyped_storage()
        return ("t", storage.data_ptr()), storage.nbytes()
    if isinstance(obj, np.ndarray):
        base = obj
        while isinstance(base.base, np.ndarray):
            base = base.base
        return ("n", id(base)), base.nbytes
    return None


def walk(obj, path: str, found: dict, seen: set, depth: int = 0) -> None:
    """Every tensor/array reachable from obj through fedmpi objects, containers and modules: {key: (path, bytes)}."""
    import torch

    if depth > 8 or id(obj) in seen:
        return
    seen.add(id(obj))
    size = nbytes(obj)
    if size is not None:
        key, n = size
        found.setdefault(key, (path, n))
        return
    if isinstance(obj, torch.nn.Module):
        for name, t in [*obj.named_parameters(), *obj.named_buffers()]:
            walk(t, f"{path}.{name}", found, seen, depth + 1)
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            walk(v, f"{path}[{k!r}]" if not isinstance(k, torch.Tensor) else f"{path}[param]", found, seen, depth + 1)
        return
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            walk(v, f"{path}[{i}]", found, seen, depth + 1)
        return
    module = type(obj).__module__ or ""
    if module.startswith(("fedmpi", "bench", "tools")) and hasattr(obj, "__dict__"):
        for k, v in vars(obj).items():
            walk(v, f"{path}.{k}", found, seen, depth + 1)


def account(role) -> dict:
    """The role's tensors by part, each storage once, in the order of the parts below."""
    parts = {"model parameters": [getattr(role, "state", None) and role.state.tensors],
             "classifier shard": [getattr(role, "classifier", None)],
             "optimizer state": [getattr(role, "algo_state", None), getattr(role, "classifier_opt", None)],
             "data": [getattr(role, "dataset", None)]}
    claimed: dict = {}
    out = {name: 0.0 for name in parts}
    found: dict = {}
    walk(role, "", found, set())
    shared = {key for key, (_, n) in found.items() if key[0] == "t" and key[1] in node_shared_pointers()}
    claimed.update((key, "node-shared") for key in shared)   # counted once per node, by the watchdog (Shmem)
    out["node-shared"] = sum(found[key][1] for key in shared) / MB
    for name, roots in parts.items():
        found: dict = {}
        for obj in roots:
            if obj is not None:
                walk(obj, name, found, set())
        for key, (_, n) in found.items():
            if key not in claimed:
                claimed[key] = name
                out[name] += n / MB
    found = {}
    walk(role, "", found, set())
    buffers: dict[str, float] = {}
    for key, (path, n) in found.items():
        if key not in claimed:
            claimed[key] = path
            buffers[path.lstrip(".")] = buffers.get(path.lstrip("."), 0.0) + n / MB
    out["kept flat buffers"] = sum(buffers.values())
    return {"parts": out, "buffers": {k: v for k, v in buffers.items() if v >= 0.5}}


def node_shared_pointers() -> set:
    """Where the tensors a party's ranks share on a node start (fedmpi/comm/node_share.py; none before it)."""
    try:
        from fedmpi.comm.node_share import _SHARED
    except ImportError:
        return set()
    return _SHARED


def this_rank() -> int:
    return int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK", "0")))


def main() -> None:
    out, module, args = sys.argv[1], sys.argv[3], sys.argv[4:]
    assert sys.argv[2] == "-m", "usage: memory_probe.py OUT -m MODULE [ARGS...]"
    record: dict = {"rank": this_rank(), "pid": os.getpid(), "python": anon_mb()}
    import torch  # noqa: F401 - what torch alone costs, before anything of the run
    record["torch"] = anon_mb()
    sampler = Sampler()
    threading.Thread(target=sampler.loop, daemon=True).start()
    try:
        import fedmpi.core.driver as context
    except ImportError:  # a checkout from before fedmpi/core (roles/context.py held drive)
        import fedmpi.roles.context as context

    drive = context.drive

    def probed_drive(role, *args):
        record["role"] = type(role).__name__ + (" (leader)" if getattr(role, "is_leader", False) else "")
        record["entry"] = anon_mb()
        record.update(account(role))
        state = getattr(role, "state", None)
        trainer = hasattr(role, "classifier")
        grads = state.n_trainable * state.tensors[0].element_size() if (state is not None and trainer) else 0
        if trainer:
            grads += sum(p.numel() * p.element_size() for p in role.classifier.parameters())
        record["grads"] = grads / MB
        sampler.phase = "run"
        return drive(role, *args)

    context.drive = probed_drive

    def report() -> None:
        record.update(peak_setup=sampler.peak["setup"], peak_run=sampler.peak["run"], exit=anon_mb())
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, f"rank-{record['rank']}.json"), "w") as f:
            json.dump(record, f)

    atexit.register(report)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
