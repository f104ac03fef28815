"""The same backbone, run faster on a GPU: each transform keeps the model's arithmetic (up to floating-point
rounding) and its state_dict keys, so a checkpoint, an export or the flat state the exchange moves does not
depend on which are on (docs/GPU.md, "The trainer's step").

- channels_last: 4-D weights and activations in NHWC order, the layout cuDNN's fastest convolutions read;
- BatchNorm in float32 under autocast: torch's batch-norm backend selection gives cuDNN no bfloat16 input, so
  under bf16 autocast every BatchNorm runs torch's native kernels; with its input cast to float32 it takes cuDNN;
- torch.compile (TorchInductor), with or without CUDA graphs (`compile_mode`);
- CUDA graphs without compiling (`graphed`): the backbone's forward and backward captured once and replayed.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import torch
from torch import nn

COMPILE_CHOICES = ("off", "default", "max-autotune")


class Float32BatchNorm:
    """A BatchNorm computed in float32 whatever autocast says; returns float32 (the next layer casts it as
    autocast wants). Mixed in before the layer's own class: parameters, buffers and keys stay the layer's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=x.device.type, enabled=False):
            return super().forward(x.float())


_FLOAT32_CLASSES: dict[type, type] = {}


def keep_batchnorm_fp32(module: nn.Module) -> int:
    """Every 2-D BatchNorm of `module` (grouped ones too, models/bn_groups.py) computed in float32, its class
    swapped in place (the same parameters and buffers); returns how many."""
    count = 0
    for m in module.modules():
        cls = type(m)
        if isinstance(m, nn.BatchNorm2d) and not isinstance(m, Float32BatchNorm):
            if cls not in _FLOAT32_CLASSES:
                _FLOAT32_CLASSES[cls] = type(f"Float32{cls.__name__}", (Float32BatchNorm, cls), {})
            m.__class__ = _FLOAT32_CLASSES[cls]
            count += 1
    return count


def to_channels_last(module: nn.Module) -> nn.Module:
    """The 4-D parameters and buffers of `module` in channels_last order (in place; the module returned)."""
    return module.to(memory_format=torch.channels_last)


def compile_mode(compile: str, cuda_graphs: bool) -> str | None:
    """torch.compile's mode for run.compile and run.cuda_graphs (None: no compiling): 'reduce-overhead' and
    'max-autotune' capture CUDA graphs, 'default' and 'max-autotune-no-cudagraphs' do not."""
    if compile not in COMPILE_CHOICES:
        raise ValueError(f"compile {compile!r}: expected one of {', '.join(COMPILE_CHOICES)}")
    if compile == "off":
        return None
    if compile == "default":
        return "reduce-overhead" if cuda_graphs else "default"
    return "max-autotune" if cuda_graphs else "max-autotune-no-cudagraphs"


def use_compile_cache(folder: str | Path) -> Path:
    """TorchInductor's and Triton's caches in `folder` (created), so that a requeued job finds the kernels and
    graphs its first start compiled. Must run before the first compilation of the process."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder / "inductor")
    os.environ["TRITON_CACHE_DIR"] = str(folder / "triton")
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")
    return folder


def compiled(module: nn.Module, mode: str, backend: str = "inductor") -> nn.Module:
    """torch.compile(module) with `mode`; shapes are taken as static (a trainer's batches all have one shape)."""
    return torch.compile(module, mode=mode if backend == "inductor" else None, backend=backend, dynamic=False)


def graphed(module: nn.Module, sample: torch.Tensor) -> nn.Module:
    """`module`'s forward and backward captured as CUDA graphs for inputs shaped like `sample` (the trainer's
    one batch shape) and replayed at every call; the module's parameters stay its own. Autocast is applied
    during the capture as the caller's context has it (its weight cache off, which capture needs)."""
    return torch.cuda.make_graphed_callables(module, (sample,), allow_unused_input=True)


class FirstCallTimer:
    """Wall seconds of the first call of a compiled step (where compiling happens), for the run's output and
    log; later calls pass through untimed."""

    def __init__(self):
        self.seconds: float | None = None
        self._start: float | None = None

    def start(self) -> None:
        if self.seconds is None:
            self._start = time.perf_counter()

    def stop(self, device: torch.device) -> float | None:
        """The first call's seconds, once (None afterwards and before)."""
        if self._start is None:
            return None
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        self.seconds, self._start = time.perf_counter() - self._start, None
        return self.seconds
