"""`python -m jobs.sweep NAME [--only RUNS] [--dry-run] [--wait] [--local] [key=value ...]`: submit one of the
papers' sweeps (fig4, table1, fig5, hsu; see jobs/sweep_plans.py) as Slurm job arrays through submitit, one array per
rank layout, or with --local run them one after another on this machine under mpirun. The hsu grid is reduced
by --alpha/--fraction/--epochs/--lr/--seeds/--beta/--algorithms. Every run logs to {folder}/runs/{run}/log.h5; {folder}/index.json records what ran where and is
updated while --wait waits (bounded by --timeout). `python -m jobs.sweep --status FOLDER` refreshes and
prints the states of an earlier sweep. Extra key=value overrides apply to every run."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

import submitit

from jobs.executor import allocation_for, layout_of, make_executor
from jobs.hsu_sweep import add_grid_arguments, grid_from_args
from fedmpi.analysis.sweep_index import ended, new_index, read_index, write_index
from jobs.site import ROOT, Site, load_site
from jobs.sweep_plans import RunSpec, plan
from jobs.task import FedmpiTask, RunResult
from jobs.watch import wait_for


def planned_rows(runs: list[RunSpec], folder: Path, site: Site) -> list[dict]:
    """One index row per run (before submission), with its layout and allocation."""
    rows = []
    for run in runs:
        overrides = list(run.overrides) + [f"log.dir={folder / 'runs'}", f"log.name={run.name}"]
        layout = layout_of(str(ROOT / run.config), overrides)
        alloc = allocation_for(layout, site)
        rows.append({"name": run.name, "config": run.config, "overrides": overrides, "labels": run.labels,
                     "world": layout["world"], "layout": layout,
                     "allocation": f"{alloc.nodes} node(s) x {alloc.tasks_per_node} "
                                   f"{'task slots' if site.cpu else 'GPUs'}",
                     "log_dir": str(folder / "runs" / run.name), "log": str(folder / "runs" / run.name / "log.h5"),
                     "job_id": None, "state": "PLANNED", "exit_status": None})
    return rows


def submit_rows(rows: list[dict], folder: Path, site: Site, workdir: Path, parallelism: int | None,
                name: str) -> list[submitit.Job]:
    """Submit the rows as one job array per distinct layout; fills in job ids. Returns jobs in row order."""
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(json.dumps(row["layout"]), []).append(i)    # party order matters: no sort_keys
    jobs: list[submitit.Job | None] = [None] * len(rows)
    for key, members in groups.items():
        executor = make_executor(folder / "jobs", json.loads(key), site, name=name, array_parallelism=parallelism)
        with executor.batch():
            pending = [executor.submit(FedmpiTask(config=str(ROOT / rows[i]["config"]),
                                                  overrides=tuple(rows[i]["overrides"]), workdir=str(workdir),
                                                  cpu=site.cpu, extra_args=tuple(rows[i].get("args", ()))))
                       for i in members]
        for i, job in zip(members, pending):
            jobs[i] = job
            rows[i].update(job_id=job.job_id, array_job=job.job_id.split("_")[0], state="SUBMITTED",
                           submitit_folder=str(folder / "jobs"), tasks=rows[i]["world"])
    return jobs  # type: ignore[return-value]


def wait_rows(rows: list[dict], jobs: list[submitit.Job], folder: Path, index: dict, timeout_s: float) -> None:
    by_id = {row["job_id"]: row for row in rows}

    def changed(job_id: str, state: str) -> None:
        by_id[job_id]["state"] = state
        write_index(folder, index)
        print(f"{job_id:>12}  {by_id[job_id]['name']:<28} {state}", file=sys.stderr, flush=True)

    outcomes = wait_for(jobs, timeout_s, on_change=changed)
    for job_id, outcome in outcomes.items():
        row = by_id[job_id]
        if outcome.state != "WAITING":    # else keep the last state seen (PENDING, RUNNING, ...)
            row["state"] = outcome.state
        if isinstance(outcome.result, RunResult):
            row["exit_status"] = outcome.result.exit_status
            if outcome.result.exit_status != 0:
                row["state"] = "FAILED"
        if outcome.error:
            row["error"] = outcome.error[-2000:]
    write_index(folder, index)


def print_plan(rows: list[dict], folder: Path) -> None:
    for row in rows:
        print(f"{row['name']}: {row['world']} ranks on {row['allocation']}\n"
              f"  python -m fedmpi.run --config {row['config']} {' '.join(row['overrides'])}")
    print(f"{len(rows)} runs; logs under {folder / 'runs'}")


def print_table(rows: list[dict]) -> None:
    width = max([len(r["name"]) for r in rows] + [4])
    print(f"{'run':<{width}}  {'ranks':>5}  {'job':>12}  {'state':<10}  log")
    for r in rows:
        print(f"{r['name']:<{width}}  {r['world']:>5}  {r['job_id'] or '-':>12}  {r['state']:<10}  {r['log']}")


def refresh(folder: Path, timeout_s: float) -> dict:
    """Re-read the states of an earlier sweep's jobs (waiting at most timeout_s for those still running)."""
    index = read_index(folder)
    rows = [r for r in index["runs"] if r.get("job_id")]
    jobs = [submitit.SlurmJob(r["submitit_folder"], r["job_id"], tasks=range(r["tasks"])) for r in rows]
    wait_rows(rows, jobs, folder, index, timeout_s)
    return index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.sweep", description=__doc__)
    parser.add_argument("name", nargs="?", help="fig4 | table1 | fig5 | hsu")
    parser.add_argument("overrides", nargs="*", help="key=value overrides for every run (e.g. to shrink runs)")
    parser.add_argument("--only", action="append", default=[], help="run names or glob patterns, comma-separated")
    parser.add_argument("--folder", default=None, help="sweep folder (default sweeps/NAME-TIMESTAMP)")
    parser.add_argument("--dry-run", action="store_true", help="print the planned runs; submit nothing")
    parser.add_argument("--wait", action="store_true", help="wait for the runs (bounded by --timeout)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds --wait / --status waits at most")
    parser.add_argument("--parallel", type=int, default=None, help="at most this many runs of an array at once")
    parser.add_argument("--status", metavar="FOLDER", default=None, help="refresh and print an earlier sweep")
    parser.add_argument("--local", action="store_true", help="run here, one run after another, under mpirun "
                                                             "(--timeout bounds each run)")
    add_grid_arguments(parser)
    args = parser.parse_intermixed_args(argv)
    try:
        if args.status:
            index = refresh(Path(args.status), args.timeout if args.wait else 0.0)
            print_table(index["runs"])
            return 0 if all(ended(r) for r in index["runs"]) else 1
        if not args.name:
            parser.error("give a sweep name (fig4, table1, fig5, hsu) or --status FOLDER")
        bad = [o for o in args.overrides if "=" not in o]
        if bad:
            parser.error(f"argument {bad[0]!r} is not an override: write key.path=value")
        site = Site(cpu=True) if args.local else load_site()
        runs = plan(args.name, args.only, args.overrides, grid_from_args(args))
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        folder = Path(args.folder or Path("sweeps") / f"{args.name}-{stamp}").resolve()
        rows = planned_rows(runs, folder, site)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        print_plan(rows, folder)
        return 0
    completed = execute(args.name, rows, folder, site, local=args.local, wait=args.wait, timeout_s=args.timeout,
                        parallel=args.parallel)
    return 0 if completed or not (args.wait or args.local) else 1


def execute(name: str, rows: list[dict], folder: Path, site: Site, *, local: bool, wait: bool, timeout_s: float,
            parallel: int | None = None, extra: dict | None = None, lock: str | None = None,
            lock_hold_s: float = 0.0) -> bool:
    """Run planned rows here one after another (local; timeout_s bounds each run) or submit them to Slurm
    (waiting at most timeout_s when `wait`); {folder}/index.json records them, with `extra` keys at its top.
    Rows that already ended (COMPLETED or DIVERGED, carried over from an earlier index) are recorded but not run
    again. `lock`: a file
    the local runs hold (flock) only while they run, released after each run or once held lock_hold_s seconds
    (jobs/local.py).
    Returns whether every run ended with its result (False for a submission not waited for)."""
    folder.mkdir(parents=True, exist_ok=True)
    index = {**new_index(name, folder), **(extra or {})}
    index["runs"] = rows
    pending = [r for r in rows if not ended(r)]
    if local:
        from jobs.local import run_rows_locally
        run_rows_locally(pending, folder, index, timeout_s, lock, lock_hold_s)
    else:
        jobs = submit_rows(pending, folder, site, Path(os.getcwd()), parallel, f"fedmpi-{name}")
        path = write_index(folder, index)
        print(f"submitted {len(jobs)} runs; index {path}", file=sys.stderr, flush=True)
        if wait:
            wait_rows(pending, jobs, folder, index, timeout_s)
    print_table(rows)
    return (local or wait) and all(ended(r) for r in rows)


if __name__ == "__main__":
    sys.exit(main())
