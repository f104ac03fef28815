"""The random number generators of a process, captured for a checkpoint and restored on resume; run.deterministic."""
from __future__ import annotations

import os
import random

import numpy as np


def capture_rng() -> dict:
    """The global generators of this process: torch (and CUDA), numpy's legacy one, Python's `random`."""
    import torch

    version, words, gauss = random.getstate()
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
             "python": {"version": version, "state": np.array(words, dtype=np.int64), "gauss_next": gauss}}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    py = state["python"]
    random.setstate((py["version"], tuple(int(x) for x in py["state"]), py["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def configure_determinism(cfg) -> None:
    """run.deterministic: deterministic kernels and fixed seeds (with data.workers=0 a CPU run is bitwise
    reproducible, and so is a run stopped and resumed)."""
    if not cfg.run.deterministic:
        return
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    random.seed(cfg.run.seed)
    np.random.seed(cfg.run.seed)
    torch.manual_seed(cfg.run.seed)
