"""`python -m jobs.reproduce fedface|badparty|hsu|hsu-long --scale cpu [--slurm] [key=value ...]`: run a study (FedFace's
Table 1, Fig. 4-6 and a bad-party run, jobs/fedface_study.py; a bad party, robust rules and DP,
jobs/badparty_study.py; Hsu et al.'s claims, jobs/hsu_study.py, whose second stage of runs is chosen from the
first's results, and its long alpha = 0 stage, jobs/hsu_long.py; the field's baselines, jobs/frbaselines_study.py, whose runs from a pretrained start follow the
pretraining) through the sweep machinery of jobs/sweep.py -- here under
mpirun one run after another, or with --slurm as job arrays (waiting for them, bounded by --timeout) -- then
write the results file (default docs/results/fedface_<scale>.md, figures beside it) from the runs' HDF5 logs
with fedmpi/analysis/fedface_report.py. The sweep folder (logs, index.json with every run's wall and CPU time) is
--folder; the synthetic data is generated in {folder}/data unless data.root is given. `--report-only` rewrites the
results file from an earlier study's folder without running anything. Extra key=value overrides apply to every
run (e.g. data.root=/scratch/data)."""
from __future__ import annotations

import argparse
import datetime
import fnmatch
import importlib
import os
import subprocess
import sys
import time
from pathlib import Path

from jobs.badparty_study import SCALES as BADPARTY_SCALES, study as badparty_study
from jobs.fedface_study import SCALES, study
from jobs.frbaselines_study import SCALES as FR_SCALES, follow_up as fr_follow_up, study as fr_study
from jobs.hsu_long import SCALES as HSU_LONG_SCALES, follow_up as hsu_long_follow_up, study as hsu_long_study
from jobs.hsu_study import SCALES as HSU_SCALES, follow_up as hsu_follow_up, study as hsu_study
from fedmpi.analysis.sweep_index import ended, read_index, write_index
from jobs.local import children_cpu_s
from jobs.site import ROOT, Site, load_site
from jobs.sweep import execute, planned_rows, print_plan
from jobs.sweep_plans import RunSpec

# study -> (its scales, its runs at a scale, the function that writes its results file from the logs)
STUDIES = {"fedface": (SCALES, study, "fedmpi.analysis.fedface_report:write_report"),
           "badparty": (BADPARTY_SCALES, badparty_study, "fedmpi.analysis.badparty_report:write_report"),
           "fr-baselines": (FR_SCALES, fr_study, "fedmpi.analysis.frbaselines_report:write_report"),
           "hsu": (HSU_SCALES, hsu_study, "fedmpi.analysis.hsu_report:write_report"),
           "hsu-long": (HSU_LONG_SCALES, hsu_long_study, "fedmpi.analysis.hsu_long_report:write_report")}
# study -> the runs it adds once its first runs are done, chosen from (or made from) their results:
# (scale, folder) -> runs
FOLLOW_UPS = {"hsu": hsu_follow_up, "hsu-long": hsu_long_follow_up, "fr-baselines": fr_follow_up}
SESSION_KEYS = ("command", "commit", "started", "load_before", "load_after", "wall_s", "cpu_s")


SCHEDULING_OPTIONS = ("--lock", "--lock-hold")   # how runs shared a machine, not what they computed


def command_line(argv: list[str]) -> str:
    """The command as recorded in results: without the scheduling options, whose values are machine paths."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in SCHEDULING_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{option}=" for option in SCHEDULING_OPTIONS)):
            kept.append(arg)
    return " ".join(["python -m jobs.reproduce", *kept])


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=str(ROOT))
        # what the studies write (docs/results/) does not make the code that ran it uncommitted
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)docs/results"], capture_output=True, text=True, timeout=10,
                               cwd=str(ROOT)).stdout.strip()
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_study(name: str, runs: list[RunSpec], folder: Path, site: Site, args, argv: list[str]) -> dict:
    """Run (or submit and wait for) the study; returns its index with the study's wall/CPU time and load. With
    --resume the runs an earlier session of the same study completed in `folder` are kept, not run again, and
    the times add up over the sessions."""
    rows = planned_rows(runs, folder, site)
    study = {"command": command_line(argv), "commit": git_commit(), "scale": args.scale, "cores": os.cpu_count(),
             "where": "slurm" if args.slurm else "local", "sessions": []}
    if args.resume and (folder / "index.json").is_file():
        earlier = read_index(folder)
        done = {r["name"]: r for r in earlier["runs"] if ended(r)}
        rows = [done.get(row["name"], row) for row in rows]
        for row in rows:
            if not ended(row):    # a run cut short continues from its checkpoint (or starts over,
                row["args"] = ["--resume", "auto"]    # its partial log kept under another name)
        before = earlier.get("study", study)
        sessions = before.get("sessions") or ([{k: before.get(k) for k in SESSION_KEYS}] if "wall_s" in before else [])
        study = {**before, "sessions": sessions}
    session = {"command": command_line(argv), "commit": git_commit(),
               "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "load_before": [round(v, 2) for v in os.getloadavg()],
               "runs": [r["name"] for r in rows if not ended(r)]}
    cpu_before, start = children_cpu_s(), time.monotonic()
    execute(name, rows, folder, site, local=not args.slurm, wait=True, timeout_s=args.timeout,
            extra={"study": study}, lock=args.lock, lock_hold_s=args.lock_hold)
    session.update(wall_s=round(time.monotonic() - start, 1),
                   cpu_s=round(children_cpu_s() - cpu_before, 1) if not args.slurm else None,
                   load_after=[round(v, 2) for v in os.getloadavg()])
    index = read_index(folder)
    sessions = [*study["sessions"], session]
    index["study"].update(sessions=sessions, started=sessions[0]["started"],
                          load_before=sessions[0]["load_before"], load_after=session["load_after"],
                          wall_s=round(sum(s["wall_s"] for s in sessions), 1),
                          cpu_s=None if args.slurm else round(sum(s["cpu_s"] or 0 for s in sessions), 1))
    write_index(folder, index)
    return index


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m jobs.reproduce", description=__doc__)
    parser.add_argument("study", choices=list(STUDIES))
    parser.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    parser.add_argument("--scale", default="cpu", help="the study's scale (fedface: " + ", ".join(SCALES) + ")")
    parser.add_argument("--slurm", action="store_true", help="submit the runs to Slurm (jobs/sweep.py's arrays) "
                                                             "instead of running them here")
    parser.add_argument("--folder", default=None, help="sweep folder (default sweeps/<study>-<scale>-TIMESTAMP)")
    parser.add_argument("--out", default=None, help="results file (default docs/results/<study>_<scale>.md)")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds each local run may take; with --slurm, the whole wait (default 1800)")
    parser.add_argument("--only", action="append", default=[],
                        help="run only these runs (names or glob patterns, comma-separated; the report then says "
                             "which runs are missing)")
    parser.add_argument("--lock", default=None, metavar="FILE",
                        help="hold this lock file (flock) during each local run only, so that other work on a "
                             "shared machine interleaves between runs (e.g. /tmp/fedmpi-heavy.lock)")
    parser.add_argument("--lock-hold", type=float, default=0.0, metavar="S",
                        help="with --lock: keep it across runs until S seconds of holding it have passed, then "
                             "release it before the next run (default 0: released after every run)")
    parser.add_argument("--dry-run", action="store_true", help="print the planned runs; run nothing")
    parser.add_argument("--report-only", action="store_true", help="write the results file from --folder's logs")
    parser.add_argument("--resume", action="store_true", help="keep the runs an earlier session completed in "
                                                              "--folder; run the others")
    return parser.parse_intermixed_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    scales, make, report = STUDIES[args.study]
    if args.scale not in scales:
        print(f"error: --scale {args.scale!r}: known scales of {args.study}: {', '.join(scales)}", file=sys.stderr)
        return 2
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        print(f"error: argument {bad[0]!r} is not an override: write key.path=value", file=sys.stderr)
        return 2
    if args.report_only and not args.folder:
        print("error: --report-only needs --folder (an earlier study's sweep folder)", file=sys.stderr)
        return 2
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    folder = Path(args.folder or ROOT / "sweeps" / f"{args.study}-{args.scale}-{stamp}").resolve()
    out = Path(args.out or ROOT / "docs" / "results" / f"{args.study}_{args.scale}.md").resolve()
    if folder.is_relative_to(ROOT):     # paths relative to the repository in the index, the overrides and the logs
        os.chdir(ROOT)
        folder = folder.relative_to(ROOT)
    extra = [o for o in args.overrides] + ([] if any(o.startswith("data.root=") for o in args.overrides)
                                           else [f"data.root={folder / 'data'}"])
    scale = scales[args.scale]
    patterns = [p for item in args.only for p in item.split(",") if p]

    def planned(specs) -> list[RunSpec]:
        specs = [RunSpec(r.name, r.config, r.overrides + tuple(extra), r.labels) for r in specs]
        return [r for r in specs if any(fnmatch.fnmatchcase(r.name, p) for p in patterns)] if patterns else specs

    runs = planned(make(scale))
    if patterns and not runs:
        print(f"error: --only {','.join(patterns)}: no run of the study matches", file=sys.stderr)
        return 2
    try:
        if args.dry_run:
            print_plan(planned_rows(runs, folder, Site(cpu=True) if not args.slurm else load_site()), folder)
            return 0
        if not args.report_only:
            site = load_site() if args.slurm else Site(cpu=True)
            run_study(args.study, runs, folder, site, args, argv)
            if args.study in FOLLOW_UPS:   # the completed runs are kept, the chosen ones added
                more = planned(FOLLOW_UPS[args.study](scale, folder))
                run_study(args.study, runs + more, folder, site, argparse.Namespace(**{**vars(args), "resume": True}),
                          argv)
        module, function = report.split(":")
        write_report = getattr(importlib.import_module(module), function)
        write_report(folder, out, scale.rationale,
                     f"`{command_line(argv)}` (commit {git_commit()})" if args.report_only else "")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    index = read_index(folder)
    failed = [r["name"] for r in index["runs"] if not ended(r)]
    if failed:
        print(f"error: {len(failed)} run(s) did not complete: {', '.join(failed)} (see {folder}/runs/NAME/"
              "stderr.txt); the results file says so", file=sys.stderr)
        return 1
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
