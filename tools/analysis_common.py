"""Shared pieces of the analysis tools: finding runs, loading a log into memory, method and setting names,
smoothing, tables (terminal / Markdown / CSV) and figures (PNG, PDF on request).

Runs are named on the command line by a log file (`.../log.h5`), a run folder holding `log.h5`, or a sweep
folder (every `log.h5` below it; its `index.json`, when present, gives each run's setting).
"""
from __future__ import annotations

import argparse
import csv
import fnmatch
import functools
import io
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from fedmpi.store.h5log import LogReader, LogSchemaError

LOG_NAME = "log.h5"
INDEX_NAME = "index.json"
# index.json entry keys that may name a run's log file or folder, tried in this order
INDEX_PATH_KEYS = ("log", "log_path", "log_dir", "path", "run_dir", "dir", "folder")

METHOD_NAMES = {"solo": "Solo", "centralized": "Centralized", "fedavg": "FedAvg", "fedavgm": "FedAvgM",
                "pfm": "PFM"}
METHOD_ORDER = ("Solo", "Centralized", "FedAvg", "FedAvg+FV", "FedAvgM", "FedAvgM+FV", "PFM", "PFM+FV")
METHOD_COLORS = {"Solo": "#7f7f7f", "Centralized": "#000000", "FedAvg": "#1f77b4", "FedAvg+FV": "#17becf",
                 "FedAvgM": "#9467bd", "FedAvgM+FV": "#e377c2", "PFM": "#ff7f0e", "PFM+FV": "#d62728",
                 "FedAvg+FV moving-norm": "#aec7e8", "FedAvgM+FV moving-norm": "#f7b6d2",
                 "PFM+FV moving-norm": "#ff9896"}
METRIC_NAMES = {"accuracy": "verification accuracy", "accuracy_std": "accuracy std over folds",
                "tar_far_1e-3": "TAR @ FAR=1e-3", "tar_far_1e-2": "TAR @ FAR=1e-2",
                "headline": "result (accuracy; IJB-B TAR@FAR=1e-4, IJB-C TAR@FAR=1e-5, MegaFace rank-1)",
                **{f"tar_far_1e-{k}": f"TAR @ FAR=1e-{k}" for k in (1, 4, 5, 6)},
                "rank1": "rank-1 identification (largest gallery)",
                **{f"rank1_1e{k}": f"rank-1 identification, 1e{k} distractors" for k in range(1, 7)}}
K_FREE = ("solo", "centralized")     # algorithms whose runs K (local steps per round) does not change
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
        name = METHOD_NAMES.get(self.algorithm, self.algorithm)
        return name + "+FV" if self.fv_enabled and self.algorithm not in ("solo", "centralized") else name

    @property
    def method(self) -> str:
        """base_method, marked when FV uses the Moving Norm (the paper's runs use Local Norm, Sec. 4.4)."""
        return self.base_method + (" moving-norm" if self.fv_norm == "moving" else "")

    @property
    def solo_party(self) -> str | None:
        if self.algorithm != "solo":
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
        elif run.algorithm not in K_FREE:
            groups.setdefault(run.derived_setting, []).append(run)
    implied = {run.derived_setting: (run.model_short, run.n_parties) for run in runs
               if not run.settings and run.algorithm not in K_FREE}
    for run in runs:
        if run.settings or run.algorithm not in K_FREE:
            continue
        joined = [name for name, key in implied.items() if key == (run.model_short, run.n_parties)]
        for name in joined or [f"{run.model_short}, {run.n_parties}-party"]:
            groups.setdefault(name, []).append(run)
    return groups


def method_sort_key(method: str) -> tuple:
    base = method.split(" ")[0]
    return (METHOD_ORDER.index(base) if base in METHOD_ORDER else len(METHOD_ORDER), method)


def method_legend(method: str) -> str:
    return "PFM+FV (FedFace)" if method == "PFM+FV" else method


def party_row_name(party: str) -> str:
    return UNION_ROW if party == CENTRALIZED_PARTY else party


# ------------------------------------------------------------------ numbers


def ema(values, factor: float) -> np.ndarray:
    """Exponential smoothing along the first axis: s_0 = x_0, s_t = factor * s_{t-1} + (1 - factor) * x_t.
    NaN entries (nothing logged) leave the running value unchanged."""
    x = np.asarray(values, dtype=np.float64)
    out = np.full_like(x, np.nan)
    state = np.full(x.shape[1:], np.nan)
    for t in range(x.shape[0]):
        value = x[t]
        fresh = np.isnan(state) & ~np.isnan(value)
        update = ~np.isnan(state) & ~np.isnan(value)
        state = np.where(fresh, value, state)
        state = np.where(update, factor * state + (1.0 - factor) * value, state)
        out[t] = state
    return out


def ema_final(values, factor: float) -> float:
    smoothed = ema(values, factor)
    return float(smoothed[-1]) if smoothed.size else math.nan


def nan_mean(values) -> float:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return float(np.mean(values)) if values else math.nan


def throughput(rounds: dict) -> float:
    """Images per second over the whole run: sum(images_per_s * round_time) / sum(round_time)."""
    ips, t = rounds.get("images_per_s"), rounds.get("round_time")
    if ips is None or t is None or not t.size or t.sum() <= 0:
        return math.nan
    return float((ips * t).sum() / t.sum())


def elapsed(rounds: dict) -> float:
    """Wall time from the start of the first round to the end of the last logged one (seconds)."""
    wall, t = rounds.get("wall_time"), rounds.get("round_time")
    if wall is None or not wall.size:
        return math.nan
    return float(wall[-1] - wall[0] + t[0])


# ------------------------------------------------------------------ tables


@dataclass
class Table:
    header: list[str]
    rows: list[list]
    digits: int = 4                       # decimals of float cells in text and Markdown
    row_digits: list[int] | None = None   # per-row override
    footnotes: list[str] = field(default_factory=list)
    title: str = ""


def _cell(value, digits: int, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "" if fmt == "csv" else "-"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.10g}" if fmt == "csv" else f"{float(value):.{digits}f}"
    return str(value)


def render(table: Table, fmt: str) -> str:
    """The table as aligned text ('text'), a Markdown pipe table ('md') or CSV ('csv'); footnotes follow
    (in CSV as lines starting with '#')."""
    digits = table.row_digits or [table.digits] * len(table.rows)
    cells = [[_cell(v, d, fmt) for v in row] for row, d in zip(table.rows, digits)]
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(table.header)
        writer.writerows(cells)
        for note in table.footnotes:
            buf.write(f"# {note}\n")
        return buf.getvalue()
    numeric = [all(_is_number(row[i]) for row in table.rows if row[i] is not None) and i > 0
               for i in range(len(table.header))]
    if fmt == "md":
        lines = [f"**{table.title}**", ""] if table.title else []
        lines.append("| " + " | ".join(h.replace("|", "\\|") for h in table.header) + " |")
        lines.append("|" + "|".join("---:" if n else "---" for n in numeric) + "|")
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells]
        for note in table.footnotes:
            lines += ["", note]
        return "\n".join(lines) + "\n"
    if fmt != "text":
        raise AnalysisError(f"--format {fmt!r}: expected text, md or csv")
    widths = [max(len(x) for x in col) for col in zip(table.header, *cells)]
    def line(row):
        return "  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(row, widths, numeric)).rstrip()
    lines = [table.title] if table.title else []
    lines += [line(table.header), "  ".join("-" * w for w in widths)] + [line(row) for row in cells]
    lines += table.footnotes
    return "\n".join(lines) + "\n"


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def emit(text: str, out: str | None) -> None:
    """Write to the file --out names, or to stdout."""
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)


# ------------------------------------------------------------------ figures


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def panel_grid(n: int, max_cols: int = 3, size=(5.2, 3.8)):
    """A figure with n panels in rows of up to max_cols; returns (figure, list of n axes)."""
    plt = pyplot()
    cols = max(1, min(max_cols, n))
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(size[0] * cols, size[1] * rows), squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def save_figure(fig, path: str | Path, pdf: bool = False) -> list[Path]:
    """Write the figure as PNG (and PDF beside it); returns the files written."""
    png = Path(path)
    pdf = pdf or png.suffix.lower() == ".pdf"
    if png.suffix.lower() != ".png":
        png = png.with_suffix(".png")
    png.parent.mkdir(parents=True, exist_ok=True)
    written = [png]
    fig.savefig(png, dpi=150, bbox_inches="tight")
    if pdf:
        written.append(png.with_suffix(".pdf"))
        fig.savefig(written[-1], bbox_inches="tight")
    pyplot().close(fig)
    for p in written:
        print(f"wrote {p}", file=sys.stderr)
    return written


def grouped_bars(ax, categories: list[str], series: dict[str, list[float]], colors: dict | None = None,
                 value_fmt: str = "{:+.2f}") -> None:
    """Bars grouped by category (x), one bar per series in each group, each labelled with its value."""
    n = max(1, len(series))
    width = 0.8 / n
    x = np.arange(len(categories))
    for i, (name, values) in enumerate(series.items()):
        heights = np.array([np.nan if v is None else v for v in values], dtype=float)
        bars = ax.bar(x - 0.4 + width * (i + 0.5), np.nan_to_num(heights), width,
                      label=method_legend(name), color=(colors or {}).get(name))
        for bar, h in zip(bars, heights):
            if np.isnan(h):
                bar.set_visible(False)
            elif n <= 4:
                ax.annotate(value_fmt.format(h), (bar.get_x() + bar.get_width() / 2, h),
                            ha="center", va="bottom" if h >= 0 else "top", fontsize=7,
                            xytext=(0, 2 if h >= 0 else -2), textcoords="offset points")
    ax.set_xticks(x, categories)


def figure_legend(fig, axes, title: str) -> None:
    """One legend for all panels, below them (entries in first-seen order)."""
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    if entries:
        fig.legend(list(entries.values()), list(entries.keys()), title=title, loc="upper center",
                   bbox_to_anchor=(0.5, 0.0), ncol=min(len(entries), 4), frameon=False)


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


def add_table_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("text", "md", "csv"), default="text",
                        help="table format: aligned text, Markdown, or CSV (default: text)")
    parser.add_argument("--out", metavar="FILE", help="write the table to FILE instead of stdout")


def add_figure_args(parser: argparse.ArgumentParser, default: str, name: str = "--fig",
                    what: str = "the figure") -> None:
    parser.add_argument(name, default=default, metavar="PNG",
                        help=f"where {what} goes (PNG; default: {default})")


def add_pdf_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pdf", action="store_true", help="also write each figure as PDF beside the PNG")


def cli(main, argv=None) -> int:
    """Run a tool's main; a problem with the input prints one line `error: ...` and gives exit status 2."""
    try:
        main(argv)
    except (AnalysisError, LogSchemaError, ValueError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
