"""Dataclass sections from plain data (YAML mappings): types checked, unknown keys refused, errors name the path."""
from __future__ import annotations

import dataclasses
import types
import typing

from fedmpi.errors import ConfigError

WORDS = {"yes": True, "on": True, "no": False, "off": False}


def _strip_optional(tp):
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return (args[0] if len(args) == 1 else typing.Union[tuple(args)]), type(None) in typing.get_args(tp)
    return tp, False


def _coerce(value, tp, path: str):
    tp, optional = _strip_optional(tp)
    if typing.get_origin(tp) is typing.Union and value is not None:   # e.g. int | str: the first type that fits
        for member in typing.get_args(tp):
            try:
                return _coerce(value, member, path)
            except ConfigError:
                continue
        names = " or ".join(getattr(a, "__name__", str(a)) for a in typing.get_args(tp))
        raise ConfigError(f"{path}: expected {names}, got {value!r}")
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{path}: must not be empty")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {type(value).__name__}")
        return typed_section(tp, value, path)
    origin = typing.get_origin(tp)
    if tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {type(value).__name__} {value!r}")
        return dict(value)
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{path}: expected a list, got {type(value).__name__} {value!r}")
        return [_coerce(v, item_tp, f"{path}[{i}]") for i, v in enumerate(value)]
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in WORDS:   # YAML 1.1's booleans (config/yaml_numbers.py)
            return WORDS[value.lower()]
        raise ConfigError(f"{path}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{path}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{path}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{path}: expected a string, got {value!r}")
    raise ConfigError(f"{path}: unsupported type {tp}")


def typed_section(cls, data: dict, path: str = ""):
    """An instance of the dataclass `cls` from plain data (YAML), each value checked against its field's type;
    unknown keys and wrong types raise a ConfigError naming their path below `path`."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            where = f"{path}.{key}" if path else key
            raise ConfigError(f"{where}: unknown key (known: {', '.join(sorted(names))})")
    kwargs = {k: _coerce(v, hints[k], f"{path}.{k}" if path else k) for k, v in data.items()}
    return cls(**kwargs)
