"""`python -m jobs.submit [--config F] [key=value ...]`: submit one fedmpi run to Slurm with submitit (one
task per rank, placed as the sbatch scripts place them), wait for it (bounded), print its result as JSON
and exit with the run's exit status (1 when the job ended without a result)."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

import submitit

from fedmpi.config import load_config
from jobs.executor import layout_of, make_executor
from jobs.site import Site, load_site
from jobs.task import FedmpiTask, RunResult
from jobs.watch import Outcome, wait_for

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = "configs/fedface_3party.yaml"


def resolve_config(config: str, workdir: str | Path) -> str:
    """A config path the job can open: as given from `workdir`, else from the repository."""
    path = Path(config)
    if not path.is_absolute():
        path = Path(workdir, config) if Path(workdir, config).is_file() else ROOT / config
    if not path.is_file():
        raise ValueError(f"config file not found: {config}")
    return str(path.resolve())


def submit_run(config: str, overrides: list[str] | tuple[str, ...] = (), folder: str | Path | None = None,
               site: Site | None = None, workdir: str | Path | None = None, name: str = "fedmpi",
               extra_args: tuple[str, ...] = ()) -> submitit.Job:
    """Submit one run; returns the submitit job (its result() is a jobs.task.RunResult)."""
    site = site or load_site()
    workdir = str(Path(workdir or os.getcwd()).resolve())
    config = resolve_config(config, workdir)
    overrides = list(overrides)
    if not load_config(config, overrides).log.name:
        # Named now, so that a requeued job (--resume auto) and the result find the same run folder.
        overrides.append(f"log.name={name}-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    layout = layout_of(config, overrides)
    task = FedmpiTask(config=config, overrides=tuple(overrides), workdir=workdir, cpu=site.cpu,
                      extra_args=tuple(extra_args))
    folder = Path(folder) if folder else task.run_dir().parent / "submitit" / "%j"
    executor = make_executor(folder, layout, site, name=name)
    return executor.submit(task)


def outcome_json(outcome: Outcome, job: submitit.Job) -> dict:
    result = outcome.result
    data = {"job_id": outcome.job_id, "state": outcome.state, "stdout": str(job.paths.stdout),
            "stderr": str(job.paths.stderr)}
    if isinstance(result, RunResult):
        data.update(exit_status=result.exit_status, run_dir=result.run_dir, log=result.log,
                    restarts=result.restarts)
    if outcome.error:
        data["error"] = outcome.error
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.submit", description=__doc__)
    parser.add_argument("--config", default=DEFAULT_CONFIG, help=f"YAML config (default {DEFAULT_CONFIG})")
    parser.add_argument("--folder", default=None, help="submitit's folder (default: {log.dir}/submitit/%%j)")
    parser.add_argument("--name", default="fedmpi", help="Slurm job name")
    parser.add_argument("--timeout", type=float, default=7 * 24 * 3600.0,
                        help="give up waiting after this many seconds (the job keeps running)")
    parser.add_argument("--no-wait", action="store_true", help="print the job id and return at once")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. fed.K=400")
    args = parser.parse_intermixed_args(argv)
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        parser.error(f"argument {bad[0]!r} is not an override: write key.path=value")
    try:
        job = submit_run(args.config, args.overrides, folder=args.folder, name=args.name)
    except ValueError as exc:    # fedmpi's ConfigError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"submitted job {job.job_id}", file=sys.stderr, flush=True)
    if args.no_wait:
        print(json.dumps({"job_id": job.job_id, "state": "SUBMITTED", "stdout": str(job.paths.stdout)}))
        return 0
    outcome = wait_for([job], args.timeout)[job.job_id]
    print(json.dumps(outcome_json(outcome, job), indent=1))
    if isinstance(outcome.result, RunResult):
        return outcome.result.exit_status
    return 1


if __name__ == "__main__":
    sys.exit(main())
