"""The run log: one HDF5 file per run, written by the server, readable while the run writes (SWMR).

Layout (schema version 1):
  /                attrs: schema_version, fedmpi_version, algorithm, run_name, created, parties (JSON list),
                   placement (JSON list, one {rank, node, local_rank, address} per rank of the latest launch),
                   leaves_party (silo runs: what crosses from a party to the server, in words)
  /config          the resolved config as YAML text (a resume with --allow-config-changes: the new one,
                   root attr config_changes lists each change and the round it applies from)
  /data            attrs: one JSON description per party dataset (and the split / partition hashes), the public
                   set every party holds (`data.public`), the starting model's files and sha256 (`model.init`)
                   and, where a launch compiled or captured its step (run.compile, run.cuda_graphs),
                   `first_step_s`: a JSON list of {round, party: the slowest rank's first step in seconds}
  /rounds/<col>    one row per round: round, step, lr, wall_time, round_time, images_per_s, bytes_moved
                   (= bytes_up + bytes_down + bytes_intra: parties -> server, server -> party leaders, inside
                   the parties), fv_iterations (completed in the round), loss [P] (per-party mean loss),
                   party_images_per_s [P], update_norm [P] (‖θ_i − Θ‖ of each upload, NaN where not measured),
                   uploads_excluded [P] (uploads the server's check left out: aggregation/upload_check.py)
  /fv/<col>        one row per FV iteration: round, iteration, candidates [T,P], raw_scores [T,V],
                   norm_scores [T,V], chosen, w [P]           (attrs: validators = JSON list of set names)
  /eval/<col>      one row per evaluation: round, step, then <set>/<metric> columns (attrs: sets = JSON list
                   of the pair sets, then the large-scale benchmarks, whose metrics are their own)
  /clients/<col>   cross-device runs: one row per round, round and ids [clients per round] (the sampled clients)
  /personal/<col>  the personalised evaluation (data.heldout): one row per evaluated round, round and a [P] column
                   per metric; /local/<col>: a rule with a local objective (FedFR), its round's numbers per party
  /classes/<col>   a method whose class part moves W_k: one row per round its server step ran (its columns:
                   FedGC's Reg, FedAwS's spreadout loss, PrivacyFace's releases and (epsilon, delta))
Every table is a group of 1-D-extendable datasets of equal length; all are created before SWMR starts.
A new log is written under a hidden name (`starting_name`) and takes its name at its first row. Reading one:
store/log_reader.py.
"""
from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import h5py
import numpy as np

# the readers' names, imported from here by the analysis tools and the tests
from fedmpi.store.log_reader import (SCHEMA_VERSION, LogReader, LogSchemaError, dataset_names, datasets_of,  # noqa: F401
                                     open_log)

ROUND_COLUMNS = {"round": ((), "i8"), "step": ((), "i8"), "lr": ((), "f8"), "wall_time": ((), "f8"),
                 "round_time": ((), "f8"), "images_per_s": ((), "f8"), "bytes_moved": ((), "i8"),
                 "bytes_up": ((), "i8"), "bytes_down": ((), "i8"), "bytes_intra": ((), "i8"),
                 "fv_iterations": ((), "i8")}
PARTY_COLUMNS = {"loss": "f8", "party_images_per_s": "f8", "update_norm": "f8", "uploads_excluded": "i8"}  # [P]
EVAL_METRICS = ("accuracy", "accuracy_std", "tar_far_1e-3", "tar_far_1e-2")


def round_columns(parties: int) -> dict:
    """The /rounds table's columns: {name: (shape of a row, dtype)}."""
    return {**ROUND_COLUMNS, **{name: ((parties,), dtype) for name, dtype in PARTY_COLUMNS.items()}}


def _table(group: h5py.Group, columns: dict, rows: int = 0) -> None:
    """The columns not yet in `group`, each `rows` long: NaN (or 0 for integers) where a log written before the
    column existed has rows already."""
    for name, (tail, dtype) in columns.items():
        if name in group:
            continue
        group.create_dataset(name, shape=(rows, *tail), maxshape=(None, *tail), dtype=dtype,
                             chunks=(64, *tail) if tail else (256,), fillvalue=np.nan if dtype == "f8" else 0)


class RunLog:
    """Writer. Create with the run's shape; `append(table, **row)`; flushed after every append."""

    def __init__(self, path: str | Path, *, config_yaml: str, algorithm: str, run_name: str,
                 parties: list[str], val_sets: list[str] = (), fv_candidates: int = 0,
                 data: dict | None = None, resume_round: int | None = None, config_changes: dict | None = None,
                 eval_columns: dict[str, list[str]] | None = None, extra_tables: dict | None = None,
                 placement: list[dict] | None = None, attrs: dict | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.mirror = None   # given every row after it is written (`.row(table, index, row)`, `.close()`)
        if resume_round is not None and self.path.exists():
            self.f = h5py.File(self.path, "r+", libver="latest")
            self._truncate(resume_round)
            rounds = self.f["rounds"]      # a log of an earlier fedmpi gets today's columns (no SWMR yet)
            _table(rounds, round_columns(len(parties)), rounds["round"].shape[0])
            if config_changes:
                self._record_changes(resume_round, config_yaml, config_changes)
            self._unpublished = None
        else:  # under a hidden name until its first row: a start that fails leaves no log to block the name
            self._unpublished = starting_name(self.path)
            with h5py.File(self._unpublished, "w", libver="latest") as f:
                self._create(f, config_yaml, algorithm, run_name, parties, val_sets, fv_candidates, data or {},
                             eval_columns or {})
                for name, columns in (extra_tables or {}).items():  # {table: {column: (shape, dtype)}}
                    _table(f.require_group(name), columns)
                f.attrs.update(attrs or {})   # the setting's root attributes (silo: leaves_party)
                if resume_round is not None and config_changes:   # a new log continuing another run's checkpoint
                    f.attrs["config_changes"] = json.dumps([{"round": resume_round, "changes": config_changes}])
            self.f = h5py.File(self._unpublished, "r+", libver="latest")
        if placement:  # this launch's (a resumed run may run on other nodes); SWMR allows no new attribute later
            self.f.attrs["placement"] = json.dumps(placement)
        self.f.swmr_mode = True

    def _publish(self) -> None:
        if self._unpublished is not None:
            os.replace(self._unpublished, self.path)  # the open file follows its new name
            self._unpublished = None

    @staticmethod
    def _create(f, config_yaml, algorithm, run_name, parties, val_sets, T, data, eval_columns):
        f.attrs.update({"schema_version": SCHEMA_VERSION, "algorithm": algorithm, "run_name": run_name,
                        "created": datetime.datetime.now().isoformat(timespec="seconds"),
                        "parties": json.dumps(list(parties))})
        from fedmpi import __version__
        f.attrs["fedmpi_version"] = __version__
        f.create_dataset("config", data=config_yaml)
        g = f.create_group("data")
        for key, value in data.items():
            g.attrs[key] = json.dumps(value)
        P, V = len(parties), len(val_sets)
        _table(f.create_group("rounds"), round_columns(P))
        fv = f.create_group("fv")
        fv.attrs["validators"] = json.dumps(list(val_sets))
        if T:
            _table(fv, {"round": ((), "i8"), "iteration": ((), "i8"), "candidates": ((T, P), "f8"),
                        "raw_scores": ((T, V), "f8"), "norm_scores": ((T, V), "f8"), "chosen": ((), "i8"),
                        "w": ((P,), "f8")})
        ev = f.create_group("eval")
        ev.attrs["sets"] = json.dumps([*val_sets, *eval_columns])
        if V or eval_columns:
            _table(ev, {"round": ((), "i8"), "step": ((), "i8"),
                        **{f"{s}/{m}": ((), "f8") for s in val_sets for m in EVAL_METRICS},
                        **{f"{s}/{m}": ((), "f8") for s, metrics in eval_columns.items() for m in metrics}})

    def _record_changes(self, resume_round: int, config_yaml: str, changes: dict) -> None:
        """A resume that changed settings: /config becomes the new config, and root attr `config_changes` (a
        JSON list) gets {round: the first round run with them, changes: {key: [old, new]}}."""
        history = json.loads(self.f.attrs.get("config_changes", "[]"))
        history.append({"round": resume_round, "changes": changes})
        self.f.attrs["config_changes"] = json.dumps(history)
        del self.f["config"]
        self.f.create_dataset("config", data=config_yaml)

    def _truncate(self, resume_round: int) -> None:
        """Drop rows logged after the checkpoint we resume from (round numbers >= resume_round)."""
        for table in self.f:
            g = self.f[table]
            if not isinstance(g, h5py.Group) or "round" not in g:
                continue
            keep = int(np.sum(g["round"][:] < resume_round))
            for ds in datasets_of(g):
                ds.resize(keep, axis=0)

    def record_bad_records(self, counts: dict[str, int]) -> None:
        """Records skipped (data.skip_bad) per party: /data attrs `bad_records` ({party: n}) and the
        `bad_records` field of each party's description."""
        self._publish()
        g = self.f["data"]
        g.attrs["bad_records"] = json.dumps(counts)
        for party, n in counts.items():
            if party in g.attrs:
                g.attrs[party] = json.dumps({**json.loads(g.attrs[party]), "bad_records": n})
        self.f.flush()

    def record_first_steps(self, r: int, seconds: dict[str, float]) -> None:
        """Each party's first step of this launch where it compiled or captured (slowest rank, seconds): one
        entry of /data attrs `first_step_s` per launch, so a requeue that found the compile cache shows."""
        self._publish()
        g = self.f["data"]
        entries = json.loads(g.attrs.get("first_step_s", "[]"))
        g.attrs["first_step_s"] = json.dumps([*entries, {"round": r, **seconds}])
        self.f.flush()

    def append(self, table: str, **row) -> None:
        self._publish()
        g = self.f[table]
        names = [name for name in dataset_names(g)]
        missing = set(names) - set(row)
        extra = set(row) - set(names)
        if missing or extra:
            raise KeyError(f"log table {table}: missing {sorted(missing)}, unknown {sorted(extra)}")
        n = g["round"].shape[0]
        for name in names:
            ds = g[name]
            ds.resize(n + 1, axis=0)
            ds[n] = row[name]
        for name in names:
            g[name].flush()
        if self.mirror is not None:
            self.mirror.row(table, n, row)

    def close(self) -> None:
        if self.f:
            self._publish()
            self.f.close()
            self.f = None
        if self.mirror is not None:
            self.mirror.close()
            self.mirror = None


def starting_name(path: Path) -> Path:
    """Where a new log lives until its first row (`RunLog`); what a failed start leaves, if anything."""
    return path.with_name(f".{path.name}.starting")
