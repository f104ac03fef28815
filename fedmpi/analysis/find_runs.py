"""Finding the runs the analysis tools are given: log files, run folders, sweep folders (every log below, each
run's setting from the sweep's index.json), --setting globs; and grouping runs by setting."""
from __future__ import annotations

import fnmatch
import sys
from pathlib import Path

from fedmpi.analysis.run_log import AnalysisError, LOG_NAME, Run, load_run
from fedmpi.analysis.sweep_index import INDEX_NAME, logs_in_index


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
            entry = logs_in_index(folder, LOG_NAME).get(log.resolve())
            if entry:
                return entry
    return {}


def index_setting(entry: dict) -> str | None:
    """A run's setting in a sweep index: its 'setting', else labels.setting, else labels.model (jobs.sweep_plans
    labels Fig. 4 runs with a setting and Table 1 runs with a model)."""
    labels = entry.get("labels") if isinstance(entry.get("labels"), dict) else {}
    value = entry.get("setting") or labels.get("setting") or labels.get("model")
    return str(value) if value else None


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
