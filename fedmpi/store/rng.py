"""The random number generators of a process, captured for a checkpoint and restored on resume; run.deterministic."""
from __future__ import annotations

import os
import random
import sys

import numpy as np


def capture_rng() -> dict:
    """The global generators of this process: torch (and its GPU's), numpy's legacy one, Python's `random`.
    Only the rank's own GPU's generator (the current device's): the GPUs an allocation shows a rank, and which
    of them is its own, may differ on resume."""
    import torch

    version, words, gauss = random.getstate()
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
             "python": {"version": version, "state": np.array(words, dtype=np.int64), "gauss_next": gauss}}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state(torch.cuda.current_device())
    return state


def restore_rng(state: dict) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    py = state["python"]
    random.setstate((py["version"], tuple(int(x) for x in py["state"]), py["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(own_gpu_state(state["cuda"], torch.cuda.current_device()),
                                 torch.cuda.current_device())


def own_gpu_state(saved, device: int):
    """The GPU generator state to restore on `device`: the one saved; from a checkpoint that kept every visible
    GPU's (a list, or [GPUs, n] stacked), the entry of the same device index when there is one, else the first."""
    import torch

    if isinstance(saved, torch.Tensor) and saved.dim() == 1:
        return saved
    states = list(saved)
    return states[device] if device < len(states) else states[0]


def deterministic_kernels() -> None:
    """torch.use_deterministic_algorithms(True) without its import of torch._inductor.config, which pulls in
    torch._dynamo on every rank (docs/PERFORMANCE.md gives the cost) to set a flag that only torch.compile reads;
    fedmpi compiles nothing. Where inductor is loaded already, or torch lacks the kernel-flag setter, the public
    call."""
    import torch

    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None or "torch._inductor" in sys.modules:
        torch.use_deterministic_algorithms(True)
    else:
        setter(True)


def fast_gpu_kernels() -> None:
    """For a run that need not be bitwise reproducible: cuDNN picks the fastest convolution for each shape it
    meets (the backbone's shapes never change), and float32 matrix products and convolutions use TF32 tensor
    cores (torch leaves TF32 off for matmul by default). CPU kernels are untouched."""
    import torch

    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


def configure_determinism(cfg) -> None:
    """run.deterministic: deterministic kernels and fixed seeds (with data.workers=0 a CPU run is bitwise
    reproducible, and so is a run stopped and resumed). Otherwise the fast GPU kernels (`fast_gpu_kernels`)."""
    if not cfg.run.deterministic:
        fast_gpu_kernels()
        return
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    deterministic_kernels()
    torch.backends.cudnn.benchmark = False
    random.seed(cfg.run.seed)
    np.random.seed(cfg.run.seed)
    torch.manual_seed(cfg.run.seed)
