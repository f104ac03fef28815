"""The classes the registries list by `module:Class` (rules, aggregators), imported only when a config names one:
the modules import torch, and checking a config must not."""
from __future__ import annotations

import functools
import importlib


@functools.lru_cache(maxsize=None)      # a config's checks and the builder ask for the same class several times
def listed_class(entry: str, name: str):
    """The class of a registry entry `module:Class`, imported now; it must declare the `name` it is listed under."""
    module, _, cls = entry.partition(":")
    found = getattr(importlib.import_module(module), cls)
    assert found.name == name, f"registry: {entry} declares name {found.name!r}, listed as {name!r}"
    return found
