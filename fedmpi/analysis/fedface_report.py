"""The results file of FedFace's study (jobs/reproduce.py): Table 1, Fig. 4, Fig. 5, Fig. 6 and the bad-party
weights as Markdown tables and PNGs beside it, from the HDF5 logs of a study's sweep folder, through the analysis
tools' own functions (fedmpi.analysis.table1, fedmpi.analysis.relative, fedmpi.analysis.weights, fedmpi.analysis.curves). Which run goes where comes from
the labels jobs/fedface_study.py gave it in the sweep's index.json. Text after the HAND_WRITTEN marker of an
existing results file is kept when the file is written again."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from fedmpi.analysis.sweep_index import read_index
from fedmpi.analysis.find_runs import collect_runs
from fedmpi.analysis.curves import curves_figure
from fedmpi.analysis.fedface_claims import claims_table, seed_label, seed_spread_tables, split_seed_label
from fedmpi.analysis.relative import relative_figure, relative_results, relative_table
from fedmpi.analysis.fedface_study_table import header
from fedmpi.analysis.methods import TABLE1_STUDY_METHODS, fedface_label
from fedmpi.analysis.run_log import AnalysisError
from fedmpi.analysis.table1 import table1
from fedmpi.analysis.tables import render
from fedmpi.analysis.weights import norm_figure, norm_results, norm_table, weights_figure, weights_table

HAND_WRITTEN = "<!-- hand-written below this line: kept when the file is regenerated -->"
TABLE1_METHODS = tuple(fedface_label(key) for key in TABLE1_STUDY_METHODS)
PAPER_FACTOR = 0.99    # Table 1's smoothing; the paper's 3328 rounds of K = 100 steps were logged per step


class Report:
    """Sections of Markdown, each with the runs it used and their wall time."""

    def __init__(self, folder: Path, out: Path):
        self.folder, self.out = folder, out
        self.index = read_index(folder)
        self.rows = {r["name"]: r for r in self.index["runs"]}
        self.done = {n for n, r in self.rows.items() if r.get("state") == "COMPLETED"}
        # stopped because their global model diverged (fedmpi.errors.EXIT_DIVERGED): a result, not a missing run
        self.diverged = {n for n, r in self.rows.items() if r.get("state") == "DIVERGED"}
        self.lines: list[str] = []

    def runs(self, specs: list[tuple[str, str]]):
        """The completed runs named in (setting, run name) pairs, each in its settings."""
        specs = [(s, n) for s, n in specs if n in self.done]
        if not specs:
            return []
        names = list(dict.fromkeys(n for _, n in specs))
        return collect_runs([str(self.folder / "runs" / n) for n in names], [f"{s}={n}" for s, n in specs])

    def specs(self, key: str) -> list[tuple[str, str]]:
        """(setting, run name) of every run whose label `key` is set: each setting of a list, a string label as
        the setting, True as the run's own setting."""
        out = []
        for name, row in self.rows.items():
            label = row["labels"].get(key)
            if isinstance(label, list):
                out += [(s, name) for s in label]
            elif label is True:
                out.append((row["labels"]["setting"], name))
            elif label:
                out.append((str(label), name))
        return out

    def figure(self, stem: str) -> Path:
        return self.out.with_name(f"{self.out.stem}_{stem}.png")

    def section(self, title: str, names: list[str], started: float, body: list[str], what: str) -> None:
        wall = sum(self.rows[n].get("wall_s") or 0 for n in dict.fromkeys(names))
        missing = [n for n in dict.fromkeys(names) if n not in self.done | self.diverged]
        runs = (f"; from {len(set(names))} runs that took {wall / 60:.1f} min of wall time together" if names
                else "")
        self.lines += [f"## {title}", "",
                       f"Produced by `{self.index['study']['command']}` ({what}){runs}; analysis "
                       f"{time.monotonic() - started:.1f} s."]
        if missing:
            self.lines.append(f"**Missing (did not complete):** {', '.join(missing)}.")
        self.lines += ["", *body, ""]

    def portable(self, text: str) -> str:
        """`text` without the paths of the machine that ran the study: its sweep folder as SWEEP."""
        for folder in (self.index.get("folder"), str(self.folder.resolve())):
            if folder:
                text = text.replace(str(folder).rstrip("/"), "SWEEP")
        return text

    def png(self, path: Path, alt: str) -> str:
        return f"![{alt}]({path.name})"

    def write(self) -> Path:
        """Write the sections to the results file, keeping what follows its HAND_WRITTEN marker."""
        kept = ""
        if self.out.is_file() and HAND_WRITTEN in self.out.read_text():
            kept = self.out.read_text().split(HAND_WRITTEN, 1)[1]
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text("\n".join(self.lines) + "\n" + HAND_WRITTEN + (kept or "\n"))
        return self.out


def write_report(folder: Path, out: Path, rationale: str = "", written_by: str = "") -> Path:
    """Write the results file `out` (figures beside it) from the study in `folder`; `written_by` names the
    command and commit that write it, when they are not those that ran the study (--report-only)."""
    folder, out = Path(folder), Path(out)
    report = Report(folder, out)
    report.lines += header(report, rationale)
    if written_by:
        report.lines[4:4] = [f"This file was written again from the same logs by {written_by}.", ""]
    t1, results_seeds, spread_f4 = table1_section(report)
    results = fig4_section(report, spread_f4)
    norms = fig5_section(report)
    fig6_runs = weights_section(report, "fig6", "Fig. 6: FV weights over training", "Fig. 6",
                                "fedmpi.analysis.weights.weights_table and weights_figure over the FV runs labelled fig6")
    bad_runs = weights_section(report, "bad", "Bad party: FedFace with one party's labels shuffled", "bad party",
                               "fedmpi.analysis.weights.weights_table over the shuffled run and its clean twin")
    curves_section(report)
    started = time.monotonic()
    report.section("The paper's claims, checked against these numbers", [], started,
                   [render(claims_table(t1, results, results_seeds, norms, fig6_runs, bad_runs), "md")],
                   "fedmpi.analysis.fedface_claims over the tables above")
    return report.write()


def table1_section(report: Report):
    """Table 1 and its seed-to-seed spread; (Table 1, the seeds' results, Fig. 4's spread table)."""
    started = time.monotonic()
    specs = report.specs("table1")
    runs = report.runs(specs)
    seeds = seed_specs(report)
    first_setting = split_seed_label(seeds[0][0])[0] if seeds else ""
    t1_seeds = [(s, n) for s, n in seeds if split_seed_label(s)[0] == first_setting
                and report.rows[n]["labels"]["table1"]]
    ks = {run.cfg("fed.K", 1) for run in runs}
    factor = PAPER_FACTOR ** max(ks) if len(ks) == 1 else PAPER_FACTOR   # the paper's 0.99 per step, per round
    t1 = safely(table1, runs, factor, methods=list(TABLE1_METHODS)) if runs else None
    spread_t1, spread_f4, results_seeds = seed_spread_tables(report.runs(t1_seeds), report.runs(seeds),
                                                             list(TABLE1_METHODS), factor)
    body = [render(t1, "md") if t1 else "(no run)", f"**Seed to seed, setting ({first_setting})**", "",
            render(spread_t1, "md")]
    report.section(f"Table 1: final training loss per party (EMA {factor:.4g} per round = 0.99 per step)",
                   [n for _, n in specs + t1_seeds], started, body,
                   "fedmpi.analysis.table1.table1 over the runs labelled table1, blocks by model")
    return t1, results_seeds, spread_f4


def fig4_section(report: Report, spread_f4) -> list:
    started = time.monotonic()
    specs = report.specs("fig4")
    runs = report.runs(specs)
    results = (safely(relative_results, runs, "accuracy") if runs else None) or []
    body = []
    if results:
        relative_figure(results, "accuracy", "final", str(report.figure("fig4")))
        body = [render(relative_table(results, "accuracy", "final"), "md"), report.png(report.figure("fig4"), "Fig. 4"),
                "", "**Seed to seed** (each method minus its seed's centralized run, in the settings run with "
                "several seeds)", "",
                render(spread_f4, "md")]
    report.section("Fig. 4: each method minus centralized, per validation set", [n for _, n in specs], started,
                   body, "fedmpi.analysis.relative.relative_results, held-out verification accuracy at the final evaluation")
    return results


def fig5_section(report: Report) -> list:
    started = time.monotonic()
    specs = report.specs("fig5")
    runs = report.runs([("a", n) for _, n in specs])
    norms = norm_results(runs) if runs else []
    body = []
    if norms:
        norm_figure(norms, "accuracy", str(report.figure("fig5")))
        body = [render(norm_table(norms, "accuracy"), "md"), report.png(report.figure("fig5"), "Fig. 5")]
    report.section("Fig. 5: FV score normalisation, Local vs Moving Norm", [n for _, n in specs], started, body,
                   "fedmpi.analysis.weights.norm_results over the FV runs of setting (a)")
    return norms


def curves_section(report: Report) -> None:
    started = time.monotonic()
    curve_runs = report.runs([("a", n) for n in ("a-centralized", "a-fedavg", "a-pfm", "a-fedface")])
    if curve_runs:
        curves_figure(curve_runs, [], "accuracy", 0.9, str(report.figure("curves")))
        report.section("Training loss against steps, setting (a)", [r.label for r in curve_runs], started,
                       [report.png(report.figure("curves"), "curves")], "fedmpi.analysis.curves.curves_figure, EMA 0.9")


def weights_section(report: Report, key: str, title: str, alt: str, what: str) -> list:
    """FV's weights of the runs labelled `key`: table and figure (and, for the bad party, their accuracy)."""
    started = time.monotonic()
    specs = report.specs(key)
    runs = report.runs(specs)
    body = []
    if runs:
        figure = report.figure("bad_party" if key == "bad" else key)
        weights_figure(runs, str(figure))
        body = [render(weights_table(runs), "md"), report.png(figure, alt)]
        if key == "bad":
            body += ["", "Held-out accuracy (%) at the end:", "", eval_table(runs)]
    report.section(title, [n for _, n in specs], started, body, what)
    return runs


def safely(fn, *args, **kwargs):
    """fn's result, or None where the runs at hand do not make it (a missing run, a missing baseline)."""
    try:
        return fn(*args, **kwargs)
    except AnalysisError as exc:
        print(f"note: {exc}", file=sys.stderr)
        return None


def seed_specs(report: Report) -> list[tuple[str, str]]:
    """('SETTING seed N', name) for the Fig. 4 runs of every setting run with more than one seed (a centralized
    run in each setting it is the baseline of; not the norm or bad-party extras)."""
    seeds: dict[str, set] = {}
    for row in report.rows.values():
        labels = row["labels"]
        if labels["method"] != "centralized" and labels["setting"] in labels.get("fig4", []):
            seeds.setdefault(labels["setting"], set()).add(labels["seed"])
    seeded = {s for s, found in seeds.items() if len(found) > 1}
    return [(seed_label(s, r["labels"]["seed"]), n) for n, r in report.rows.items()
            for s in r["labels"].get("fig4", []) if s in seeded]


def eval_table(runs) -> str:
    sets = list(dict.fromkeys(s for r in runs for s in r.val_sets))
    lines = ["| run | " + " | ".join(sets) + " | mean |", "|---|" + "---:|" * (len(sets) + 1)]
    for run in runs:
        values = [100 * run.eval_value(s, "accuracy") for s in sets]
        lines.append(f"| {run.label} | " + " | ".join(f"{v:.2f}" for v in values) + f" | {sum(values) / len(values):.2f} |")
    return "\n".join(lines) + "\n"
