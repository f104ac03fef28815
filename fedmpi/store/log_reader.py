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
        """All columns of a table, cut to the shortest (a row being appended is not yet whole)."""
        g = self.f.get(name)
        if g is None or "round" not in g:
            return {}
        for ds in datasets_of(g):
            ds.refresh()
        n = min(ds.shape[0] for ds in datasets_of(g))
        return {key: g[key][:n] for key in dataset_names(g)}

    def close(self) -> None:
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
