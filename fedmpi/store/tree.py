"""Values <-> HDF5, exactly: dicts are groups, tensors and arrays datasets, strings string datasets, other plain
values JSON, so any state_dict of tensors round-trips bit for bit (`write_tree` / `read_tree`); `copy_into` puts
saved tensors back into a live model's, naming the first mismatch.

torch is imported only where tensors are handled."""
from __future__ import annotations

import json

import h5py
import numpy as np

from fedmpi.store.errors import ResumeError


def _is_plain(value) -> bool:
    """JSON-able without loss: scalars and lists of them (tuples and dicts get their own groups)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, list) and all(_is_plain(v) for v in value)


def write_tree(group: h5py.Group, name: str, value) -> None:
    """Store `value` under group[name]: dict -> group, tensor/array -> dataset, str, bytes, or JSON."""
    import torch

    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, torch.Tensor):
        t = value.detach().to("cpu").contiguous()
        dtype = str(t.dtype).removeprefix("torch.")
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        item = group.create_dataset(name, data=t.numpy())
        item.attrs.update(kind="tensor", dtype=dtype)
    elif isinstance(value, np.ndarray):
        item = group.create_dataset(name, data=value)
        item.attrs["kind"] = "ndarray"
    elif isinstance(value, bytes):
        item = group.create_dataset(name, data=np.frombuffer(value, dtype=np.uint8))
        item.attrs["kind"] = "bytes"
    elif isinstance(value, str):
        item = group.create_dataset(name, data=value, dtype=h5py.string_dtype())
        item.attrs["kind"] = "str"
    elif isinstance(value, dict):
        item = group.create_group(name, track_order=True)
        int_keys = []
        for key, member in value.items():
            if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
                key = str(int(key))
                int_keys.append(key)
            elif not isinstance(key, str) or not key or "/" in key or key == ".":
                raise TypeError(f"checkpoint: cannot store the dict key {key!r} under {item.name}")
            write_tree(item, key, member)
        item.attrs.update(kind="dict", int_keys=json.dumps(int_keys))
    elif isinstance(value, (list, tuple)) and not (isinstance(value, list) and _is_plain(value)):
        item = group.create_group(name, track_order=True)
        for i, member in enumerate(value):
            write_tree(item, str(i), member)
        item.attrs.update(kind="tuple" if isinstance(value, tuple) else "list", length=len(value))
    elif _is_plain(value):
        item = group.create_dataset(name, data=json.dumps(value), dtype=h5py.string_dtype())
        item.attrs["kind"] = "json"
    else:
        raise TypeError(f"checkpoint: cannot store a {type(value).__name__} under {group.name}/{name}")


def read_tree(item):
    """The value `write_tree` stored at this group or dataset."""
    import torch

    kind = item.attrs.get("kind")
    if kind == "tensor":
        dtype = getattr(torch, item.attrs["dtype"])
        t = torch.from_numpy(np.array(item[()]))
        return t.view(torch.bfloat16) if dtype == torch.bfloat16 else t.to(dtype)
    if kind == "ndarray":
        return np.array(item[()])
    if kind == "bytes":
        return np.array(item[()], dtype=np.uint8).tobytes()
    if kind == "str":
        return item.asstr()[()]
    if kind == "json":
        return json.loads(item.asstr()[()])
    if kind == "dict":
        int_keys = set(json.loads(item.attrs["int_keys"]))
        return {int(key) if key in int_keys else key: read_tree(member) for key, member in item.items()}
    if kind in ("list", "tuple"):
        members = [read_tree(item[str(i)]) for i in range(int(item.attrs["length"]))]
        return tuple(members) if kind == "tuple" else members
    raise ValueError(f"{item.file.filename}: {item.name} is not a checkpoint value (kind {kind!r})")


def copy_into(targets: list[torch.Tensor] | dict, saved, what: str) -> None:
    """Copy saved tensors into existing ones in place (same structure), naming the first mismatch."""
    import torch

    if isinstance(targets, dict):
        if set(targets) != set(saved):
            raise ResumeError(f"checkpoint: {what} holds {sorted(saved)}, this run has {sorted(targets)}")
        for key in targets:
            copy_into(targets[key], saved[key], f"{what}/{key}")
    elif isinstance(targets, (list, tuple)):
        if len(targets) != len(saved):
            raise ResumeError(f"checkpoint: {what} has {len(saved)} tensors, this run has {len(targets)}")
        for i, (target, value) in enumerate(zip(targets, saved)):
            copy_into(target, value, f"{what}[{i}]")
    else:
        if targets.shape != saved.shape or targets.dtype != saved.dtype:
            raise ResumeError(f"checkpoint: {what} is {saved.dtype} {list(saved.shape)}, this run has "
                              f"{targets.dtype} {list(targets.shape)}")
        with torch.no_grad():
            targets.copy_(saved)
