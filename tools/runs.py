"""The analysis tools' runs: finding logs (a log file, a run folder, a sweep folder with its index.json),
reading one into memory, method names and colours (from fedmpi's registry of rules), settings, and the tools'
command-line plumbing. Tables are in tools/tables.py, figures in tools/plots.py."""
from __future__ import annotations

import argparse
import fnmatch
import functools
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from fedmpi.algorithms.registry import SINGLE_PARTY_SETTINGS, method_label
from fedmpi.store.h5log import LogReader, LogSchemaError
from tools.methods import FV_SUFFIX

LOG_NAME = "log.h5"
INDEX_NAME = "index.json"
# index.json entry keys that may name a run's log file or folder, tried in this order
INDEX_PATH_KEYS = ("log", "log_path", "log_dir", "path", "run_dir", "dir", "folder")

METRIC_NAMES = {"accuracy": "verification accuracy", "accuracy_std": "accuracy std over folds",
                "tar_far_1e-3": "TAR @ FAR=1e-3", "tar_far_1e-2": "TAR @ FAR=1e-2"}
CENTRALIZED_PARTY = "centralized"    # the single party name a centralized run logs
UNION_ROW = "union\u2020"
UNION_FOOTNOTE = ("\u2020 centralized: union loss \u2014 the centralized baseline trains on the union of all "
                  "parties' data and logs one loss over it; per-party losses are not in its log.")


class AnalysisError(ValueError):
    """Bad input to an analysis tool; the message names what is wrong."""


# ------------------------------------------------------------------ runs


@dataclass
class Run:
    """One run's log, read into memory (a log still being written is read as it stands)."""
    path: Path
    algorithm: str
    parties: list[str]
    val_sets: list[str]
    config: dict
    rounds: dict[str, np.ndarray]
    fv: dict[str, np.ndarray]
    eval: dict[str, np.ndarray]
    label: str = ""
    settings: list[str] = field(default_factory=list)   # from --setting globs or the sweep index
    index_entry: dict = field(default_factory=dict)

    def cfg(self, dotted: str, default=None):
        node = self.config
        for key in dotted.split("."):
            if not isinstance(node, dict) or key not in node:
                return default
            node = node[key]
        return node

    @property
    def fv_enabled(self) -> bool:
        return bool(self.cfg("fv.enabled", False)) or len(self.fv.get("round", ())) > 0

    @property
    def fv_norm(self) -> str | None:
        return self.cfg("fv.norm") if self.fv_enabled else None

    @property
    def base_method(self) -> str:
        """FedAvg, PFM, ...: the algorithm alone; with FV: FedAvg+FV, PFM+FV (FedFace), ..."""
        name = method_label(self.algorithm)[0]
        return name + FV_SUFFIX if self.fv_enabled and not self.single_party else name

    @property
    def setting(self) -> str:
        """fed.setting of the run (federated, centralized, solo); logs of earlier versions named the last two
        as fed.algorithm."""
        return self.cfg("fed.setting") or (self.algorithm if self.algorithm in SINGLE_PARTY_SETTINGS else "federated")

    @property
    def single_party(self) -> bool:
        """A baseline whose runs K does not change (one party: the average is its own model)."""
        return self.setting in SINGLE_PARTY_SETTINGS

    @property
    def method(self) -> str:
        """base_method, marked when FV uses the Moving Norm (the paper's runs use Local Norm, Sec. 4.4)."""
        return self.base_method + (" moving-norm" if self.fv_norm == "moving" else "")

    @property
    def solo_party(self) -> str | None:
        if self.setting != "solo":
            return None
        party = self.cfg("fed.solo_party")
        if party in self.parties:
            return party
        if len(self.parties) == 1:
            return self.parties[0]
        raise AnalysisError(f"{self.path}: solo run names no trained party (fed.solo_party={party!r}, "
                            f"log parties {self.parties})")

    @property
    def derived_setting(self) -> str:
        """The paper's panel caption (Fig. 4): e.g. 'IR-18-AF, 3-party, K=100'."""
        return f"{self.model_short}, {self.n_parties}-party, K={self.cfg('fed.K', '?')}"

    @property
    def model_short(self) -> str:
        head = {"arcface": "AF", "cosface": "CF"}.get(self.cfg("model.head", ""), str(self.cfg("model.head", "?")))
        return f"{backbone_name(self.cfg('model.backbone', '?'))}-{head}"

    @property
    def model_long(self) -> str:
        """The paper's Table 1 'Model' column: e.g. 'IR-18 ArcFace'."""
        head = {"arcface": "ArcFace", "cosface": "CosFace"}.get(self.cfg("model.head", ""),
                                                                 str(self.cfg("model.head", "?")))
        return f"{backbone_name(self.cfg('model.backbone', '?'))} {head}"

    @property
    def n_parties(self) -> int:
        parties = self.cfg("parties")
        return len(parties) if isinstance(parties, list) and parties else len(self.parties)

    @property
    def planned_rounds(self) -> int | None:
        epochs, spe, k = self.cfg("optim.epochs"), self.cfg("optim.steps_per_epoch"), self.cfg("fed.K")
        if not all(isinstance(v, int) and v > 0 for v in (epochs, spe, k)):
            return None
        return epochs * spe // k

    def loss(self, party: str) -> np.ndarray:
        """Per-round mean training loss of one party (the /rounds/loss column of that party)."""
        if party not in self.parties:
            raise AnalysisError(f"{self.path}: no party {party!r} in the log (parties {self.parties})")
        loss = self.rounds.get("loss", np.zeros((0, len(self.parties))))
        return loss[:, self.parties.index(party)] if loss.size else np.zeros(0)

    def step_of_round(self, rounds: np.ndarray) -> np.ndarray:
        """Global step at the end of each given round: from /rounds where logged, else (round + 1) * K."""
        logged = self.rounds.get("round", np.zeros(0)).tolist()
        known = dict(zip(logged, self.rounds.get("step", np.zeros(0)).tolist()))
        k = self.cfg("fed.K", 1)
        return np.array([known.get(int(r), (int(r) + 1) * k) for r in rounds], dtype=np.int64)

    def eval_metric(self, val_set: str, metric: str) -> np.ndarray:
        return self.eval.get(f"{val_set}/{metric}", np.zeros(0))

    def eval_value(self, val_set: str, metric: str, at: str = "final") -> float:
        """The metric's last logged value ('final') or its largest ('best'); NaN where nothing is logged."""
        values = self.eval_metric(val_set, metric)
        values = values[~np.isnan(values)] if values.size else values
        if not values.size:
            return math.nan
        return float(values[-1] if at == "final" else values.max())


def backbone_name(backbone: str) -> str:
    """ir18 -> IR-18."""
    text = str(backbone)
    return f"IR-{text[2:]}" if text.lower().startswith("ir") and text[2:].isdigit() else text


def load_run(path: Path) -> Run:
    with LogReader(path) as log:
        config_text = log.config_yaml
        try:
            config = yaml.safe_load(config_text) or {}
        except yaml.YAMLError as exc:
            raise AnalysisError(f"{path}: the config stored in the log is not valid YAML ({exc})") from None
        return Run(path=Path(path), algorithm=log.algorithm, parties=log.parties, val_sets=log.val_sets,
                   config=config if isinstance(config, dict) else {}, rounds=log.table("rounds"),
                   fv=log.table("fv"), eval=log.table("eval"))


def find_logs(arg: str | Path) -> list[tuple[Path, dict]]:
    """The logs an argument names, each with its sweep-index entry ({} when there is none)."""
    path = Path(arg)
    if path.is_file():
        return [(path, index_entry_above(path))]
    if not path.is_dir():
        raise AnalysisError(f"{arg}: no such log file or folder")
    if (path / LOG_NAME).is_file():
        return [(path / LOG_NAME, index_entry_above(path / LOG_NAME))]
    logs = sorted(p for p in path.rglob(LOG_NAME) if p.is_file())
    if not logs:
        raise AnalysisError(f"{arg}: no {LOG_NAME} in this folder or below it")
    return [(log, index_entry_above(log)) for log in logs]


def index_entry_above(log: Path, levels: int = 3) -> dict:
    """The log's entry in the index.json of a sweep folder above it ({sweep}/runs/{run}/log.h5), if any."""
    for folder in list(log.resolve().parents)[1:1 + levels]:
        if (folder / INDEX_NAME).is_file():
            entry = read_index(folder).get(log.resolve())
            if entry:
                return entry
    return {}


def index_setting(entry: dict) -> str | None:
    """A run's setting in a sweep index: its 'setting', else labels.setting, else labels.model (jobs.sweeps
    labels Fig. 4 runs with a setting and Table 1 runs with a model)."""
    labels = entry.get("labels") if isinstance(entry.get("labels"), dict) else {}
    value = entry.get("setting") or labels.get("setting") or labels.get("model")
    return str(value) if value else None


def read_index(sweep: Path) -> dict[Path, dict]:
    """index.json of a sweep folder (jobs/index.py) -> {resolved log path: entry}. Accepts {"runs": [...]}, a
    list of entries or {name: entry}; an entry names its run by one of INDEX_PATH_KEYS, a path that is
    absolute, relative to the sweep folder, or relative to where the sweep was started."""
    index = sweep / INDEX_NAME
    if not index.is_file():
        return {}
    stat = index.stat()
    return dict(_read_index(index.resolve(), stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=64)
def _read_index(index: Path, mtime_ns: int, size: int) -> tuple:
    sweep = index.parent
    try:
        data = json.loads(index.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AnalysisError(f"{index}: not valid JSON ({exc})") from None
    if isinstance(data, dict):
        data = data.get("runs", data)
    if isinstance(data, dict):
        data = [dict(entry, name=name) if isinstance(entry, dict) else {} for name, entry in data.items()]
    if not isinstance(data, list):
        raise AnalysisError(f"{index}: expected a list of runs or {{\"runs\": [...]}}")
    out = []
    for entry in data:
        if not isinstance(entry, dict):
            continue
        key = next((k for k in INDEX_PATH_KEYS if isinstance(entry.get(k), str)), None)
        if key is None:
            continue
        target = Path(entry[key])
        for place in ([target] if target.is_absolute() else [sweep / target, target]):
            log = place if place.suffix == ".h5" else place / LOG_NAME
            out.append((log.resolve(), entry))
    return tuple(out)


def parse_settings(specs: list[str] | None) -> list[tuple[str, str]]:
    """['NAME=GLOB', ...] -> [(name, glob)]; a name may be given several globs."""
    out = []
    for spec in specs or ():
        name, sep, pattern = spec.partition("=")
        if not sep or not name.strip() or not pattern.strip():
            raise AnalysisError(f"--setting {spec!r}: expected NAME=GLOB, e.g. 'K=100=sweep/*k100*'")
        out.append((name.strip(), pattern.strip()))
    return out


def run_matches(run: Run, pattern: str) -> bool:
    """A --setting glob matches the log path, its run folder, or the run's label."""
    candidates = {str(run.path), str(run.path.parent), run.path.parent.name, run.label,
                  str(run.path.resolve()), str(run.path.parent.resolve())}
    return any(fnmatch.fnmatch(c, pattern) for c in candidates)


def collect_runs(args: list[str], setting_specs: list[str] | None = None) -> list[Run]:
    """Find and load every run the arguments name; give each a unique label and its settings."""
    found: dict[Path, dict] = {}
    for arg in args:
        for log, entry in find_logs(arg):
            if entry or log.resolve() not in found:
                found[log.resolve()] = entry
    runs = []
    for log, entry in found.items():
        run = load_run(log)
        run.index_entry = entry
        runs.append(run)
    for run, label in zip(runs, unique_labels([r.path for r in runs])):
        run.label = label
    specs = parse_settings(setting_specs)
    for run in runs:
        if specs:
            run.settings = list(dict.fromkeys(name for name, pattern in specs if run_matches(run, pattern)))
        elif index_setting(run.index_entry):
            run.settings = [index_setting(run.index_entry)]
    if specs:
        left_out = [run.label for run in runs if not run.settings]
        runs = [run for run in runs if run.settings]
        if not runs:
            raise AnalysisError("--setting: no run matches any of the globs "
                                f"({', '.join(p for _, p in specs)}); runs: {', '.join(left_out)}")
        if left_out:
            print(f"note: left out {len(left_out)} runs that match no --setting: {', '.join(left_out)}",
                  file=sys.stderr)
    return runs


def unique_labels(paths: list[Path]) -> list[str]:
    """Short names for logs: the run folder of a log.h5 (the file stem otherwise), lengthened by parent
    folders until all names differ."""
    parts = [list(p.parent.parts) if p.name == LOG_NAME else [*p.parent.parts, p.stem] for p in paths]
    depth = 1
    while True:
        labels = ["/".join(pp[-depth:]) for pp in parts]
        if len(set(labels)) == len(labels) or depth >= max((len(pp) for pp in parts), default=1):
            return labels
        depth += 1


def runs_by_setting(runs: list[Run]) -> dict[str, list[Run]]:
    """Settings in first-seen order. A run with an assigned setting (--setting, sweep index) goes there; any
    other under the setting its config implies ('IR-18-AF, 3-party, K=100'), except that a solo or
    centralized run, which K does not change, joins every implied setting of its backbone, head and party
    count (its own 'IR-18-AF, 3-party' when there is none)."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        if run.settings:
            for name in run.settings:
                groups.setdefault(name, []).append(run)
        elif not run.single_party:
            groups.setdefault(run.derived_setting, []).append(run)
    implied = {run.derived_setting: (run.model_short, run.n_parties) for run in runs
               if not run.settings and not run.single_party}
    for run in runs:
        if run.settings or not run.single_party:
            continue
        joined = [name for name, key in implied.items() if key == (run.model_short, run.n_parties)]
        for name in joined or [f"{run.model_short}, {run.n_parties}-party"]:
            groups.setdefault(name, []).append(run)
    return groups


def party_row_name(party: str) -> str:
    return UNION_ROW if party == CENTRALIZED_PARTY else party


# ------------------------------------------------------------------ command line


def add_run_args(parser: argparse.ArgumentParser, settings: bool = True) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN_OR_SWEEP",
                        help="a log file, a run folder holding log.h5, or a sweep folder (every log.h5 below "
                             "it; its index.json, if present, gives each run's setting)")
    if settings:
        parser.add_argument("--setting", action="append", metavar="NAME=GLOB",
                            help="put runs whose path, folder or name matches GLOB into setting NAME "
                                 "(repeatable; runs matching no glob are left out; default: the sweep index's "
                                 "setting, else the setting derived from each run's config, e.g. "
                                 "'IR-18-AF, 3-party, K=100')")








def cli(main, argv=None) -> int:
    """Run a tool's main; a problem with the input prints one line `error: ...` and gives exit status 2."""
    try:
        main(argv)
    except (AnalysisError, LogSchemaError, ValueError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
