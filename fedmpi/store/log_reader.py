"""Reading a run log (store/h5log.py writes it and describes its layout): safe while the run writes (SWMR), and
refusing a log of another schema version in one line."""
from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np

SCHEMA_VERSION = 1


class LogSchemaError(RuntimeError):
    pass


def dataset_names(group: h5py.Group, prefix: str = "") -> list[str]:
    out = []
    for key, item in group.items():
        if isinstance(item, h5py.Dataset):
            out.append(prefix + key)
        else:
            out.extend(dataset_names(item, prefix + key + "/"))
    return out


def datasets_of(group: h5py.Group):
    return [group[name] for name in dataset_names(group)]


def open_log(path: str | Path) -> h5py.File:
    """The log opened read-only, in SWMR mode only when a writer holds it (a live run, or a server killed with
    it open). A truncated file (a rank killed before HDF5 wrote it out) raises OSError at once: opened in SWMR
    mode, HDF5 retries the reads of its missing metadata for minutes."""
    try:
        return h5py.File(path, "r", libver="latest")
    except OSError as exc:
        if "truncated file" in str(exc):
            raise
    return h5py.File(path, "r", libver="latest", swmr=True)


# The tables a log may hold (store/h5log.py); a run without one of them (no FV, no DP) reads it as empty.
TABLES = ("rounds", "fv", "eval", "privacy", "influence", "clients", "personal", "local", "classes")


class UnknownName(KeyError):
    """A table or column the log does not hold; the message lists those it does."""

    def __str__(self) -> str:
        return str(self.args[0])


class Columns(dict):
    """A table's {column: array}; a column it does not hold raises UnknownName listing the ones it does."""

    def __init__(self, columns: dict, where: str):
        super().__init__(columns)
        self.where = where

    def __missing__(self, key):
        raise UnknownName(f"{self.where}: no column {key!r} (columns: {', '.join(self) or 'none, no rows'})")


class LogReader:
    """Reader, safe while the run writes (SWMR). Refuses logs of an unknown schema with a clear message."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.f = open_log(self.path)
        except OSError as exc:
            raise LogSchemaError(f"{self.path}: not a readable fedmpi log ({exc})") from None
        version = self.f.attrs.get("schema_version")
        if version is None:
            raise LogSchemaError(f"{self.path}: not a fedmpi run log (no schema_version)")
        if int(version) != SCHEMA_VERSION:
            raise LogSchemaError(f"{self.path}: log schema version {int(version)}, this fedmpi reads "
                                 f"version {SCHEMA_VERSION}")

    @property
    def parties(self) -> list[str]:
        return json.loads(self.f.attrs["parties"])

    @property
    def algorithm(self) -> str:
        return str(self.f.attrs["algorithm"])

    @property
    def config_yaml(self) -> str:
        value = self.f["config"][()]
        return value.decode() if isinstance(value, bytes) else str(value)

    @property
    def val_sets(self) -> list[str]:
        return json.loads(self.f["eval"].attrs.get("sets", "[]"))

    @property
    def placement(self) -> list[dict]:
        """Where the latest launch ran each rank: {rank, node, local_rank, address} (empty in older logs)."""
        return json.loads(self.f.attrs.get("placement", "[]"))

    def table(self, name: str) -> dict[str, np.ndarray]:
        """All columns of a table, cut to the shortest (a row being appended is not yet whole); `log.table("eval")
        ["lfw/accuracy"]`. A name that is neither in this log nor one of TABLES raises UnknownName listing them."""
        g = self.f.get(name)
        where = f"{self.path} /{name}"
        if g is None and name not in TABLES:
            held = [key for key in self.f if isinstance(self.f[key], h5py.Group) and "round" in self.f[key]]
            raise UnknownName(f"{self.path}: no table {name!r} (tables: {', '.join(held)})")
        if g is None or "round" not in g:
            return Columns({}, where)
        for ds in datasets_of(g):
            ds.refresh()
        n = min(ds.shape[0] for ds in datasets_of(g))
        return Columns({key: g[key][:n] for key in dataset_names(g)}, where)

    def close(self) -> None:
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
