"""A CPU stand-in for a GPU, for tests: inside `OnDevice()` every tensor made on `DEVICE` (cuda:0, whatever this
machine has) is computed on the CPU but tagged as living on the device, and an operation that mixes a tagged
tensor with an untagged one raises the error CUDA raises ("Expected all tensors to be on the same device").
A tensor is tagged by its storage, so views, `param.data = ...` and in-place results carry the tag.

What CUDA allows is allowed here too: copy_ / to / cpu / cuda across devices, a CPU 0-dim tensor as a scalar
operand, indexing a device tensor with CPU indices or writing CPU values into it, reading values out
(item, float, tolist). What CUDA refuses is refused: any other op over tagged and untagged non-scalar tensors
(torch.mv of device rows with CPU weights, a CPU tensor indexed with device indices), and `.numpy()` of a
tagged tensor. `tensor.device` answers cuda:0 for a tagged tensor, so code that places its buffers `like=` an
input follows the data as it would on the GPU.

Strong references to every tagged tensor are kept until the mode exits: a freed storage's address could
otherwise come back as a CPU tensor's and inherit the tag."""
from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

DEVICE = torch.device("cuda", 0)
CPU = torch.device("cpu")

_DEVICE_GETTERS = {torch.Tensor.device.__get__}
_IS_CUDA_GETTERS = {torch.Tensor.is_cuda.__get__}
_CROSS_DEVICE = {torch.Tensor.copy_, torch.Tensor.__setitem__}           # legal between devices
_READ_OUT = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__float__, torch.Tensor.__int__,
             torch.Tensor.__bool__, torch.Tensor.__index__, torch.Tensor.__len__, torch.Tensor.__repr__,
             torch.Tensor.__format__, torch.Tensor.dim, torch.Tensor.size, torch.Tensor.numel,
             torch.Tensor.data_ptr, torch.Tensor.untyped_storage, torch.Tensor.element_size,
             torch.Tensor.is_floating_point, torch.Tensor.__hash__}
# attribute access (`.grad`, `.data = x`, `.T`: a view of the same storage keeps its tag) and storage checks
_ATTRIBUTES = {"__get__", "__set__", "_has_compatible_shallow_copy_type"}
_MOVES = {torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda}
_NUMPY = {torch.Tensor.numpy, torch.Tensor.__array__}


class DeviceMix(RuntimeError):
    pass


def _is_fake_device(device) -> bool:
    if device is None:
        return False
    if isinstance(device, int):
        return True
    return torch.device(device).type == "cuda"


class OnDevice(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self._tagged: dict[int, torch.Tensor] = {}

    # ------------------------------------------------------------ tags

    def on_device(self, t: torch.Tensor) -> bool:
        return t.numel() > 0 and t.untyped_storage().data_ptr() in self._tagged

    def tag(self, t: torch.Tensor) -> torch.Tensor:
        if t.numel() > 0:
            self._tagged[t.untyped_storage().data_ptr()] = t
        return t

    def _tag_all(self, out):
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.tag(t)
        return out

    # ------------------------------------------------------------ dispatch

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in _DEVICE_GETTERS:
            return DEVICE if self.on_device(args[0]) else func(*args)
        if func in _IS_CUDA_GETTERS:
            return self.on_device(args[0])
        if func in _NUMPY and self.on_device(args[0]):
            raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the "
                            "tensor to host memory first.")
        if func in _MOVES:
            return self._move(func, args, kwargs)
        if func in _READ_OUT or func in _CROSS_DEVICE or getattr(func, "__name__", "") in _ATTRIBUTES:
            return func(*args, **kwargs)
        if func is torch.Tensor.pin_memory:     # host memory either way; this machine may have no CUDA to pin with
            return args[0]
        kwargs.pop("pin_memory", None)
        wanted = kwargs.get("device")
        to_device = _is_fake_device(wanted)
        if wanted is not None:
            kwargs["device"] = CPU
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        tagged = [t for t in tensors if self.on_device(t)]
        untagged = [t for t in tensors if t.numel() > 0 and not self.on_device(t) and t.dim() > 0]
        if tagged and untagged and not self._indexing_ok(func, args):
            raise DeviceMix(f"Expected all tensors to be on the same device, but found at least two devices, "
                            f"cuda:0 and cpu! ({getattr(func, '__name__', func)}: shapes on cpu "
                            f"{[tuple(t.shape) for t in untagged]}, on cuda:0 {[tuple(t.shape) for t in tagged]})")
        out = func(*args, **kwargs)
        if to_device:
            out = self._fresh(out, tensors)
            return self._tag_all(out)
        if wanted is None and tagged:
            return self._tag_all(out)
        return out

    def _indexing_ok(self, func, args) -> bool:
        """A device tensor indexed with CPU indices: legal (the indices are copied over)."""
        return func is torch.Tensor.__getitem__ and self.on_device(args[0])

    def _fresh(self, out, inputs):
        """A factory asked for the device may have returned CPU memory it shares with an input (as_tensor of a
        CPU tensor): the device gets its own copy, as a real transfer would."""
        shared = {t.untyped_storage().data_ptr() for t in inputs if t.numel() > 0}
        if isinstance(out, torch.Tensor) and out.numel() > 0 and out.untyped_storage().data_ptr() in shared:
            return out.clone()
        return out

    def _move(self, func, args, kwargs):
        """to / cpu / cuda: the move computed on the CPU, the result tagged by where it was sent (a fresh copy
        where it changes sides, as a real transfer makes one)."""
        source = args[0]
        if func is torch.Tensor.cpu:
            target, out = CPU, source
        elif func is torch.Tensor.cuda:
            target, out = DEVICE, source
        else:
            target, call = None, [source]
            for a in args[1:]:
                if isinstance(a, torch.Tensor):
                    target = DEVICE if self.on_device(a) else CPU
                    call.append(a.dtype)
                elif isinstance(a, (str, torch.device)) or (isinstance(a, int) and not isinstance(a, bool)):
                    target = a
                    call.append(CPU)
                else:
                    call.append(a)
            if kwargs.get("device") is not None:
                target, kwargs["device"] = kwargs["device"], CPU
            out = torch.Tensor.to(*call, **kwargs)
        if target is None:     # a dtype change only: it stays where it is
            return self.tag(out) if self.on_device(source) else out
        to_device = _is_fake_device(target)
        if to_device != self.on_device(source) and out.numel() > 0 and \
                out.untyped_storage().data_ptr() == source.untyped_storage().data_ptr():
            out = out.clone()
        return self.tag(out) if to_device else out


def on_device(mode: OnDevice, t: torch.Tensor) -> bool:
    return mode.on_device(t)
