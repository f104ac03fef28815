"""A submitit SlurmExecutor for one layout: tasks = ranks, placed like the sbatch scripts place them
(jobs.placement writes the job's SLURM_HOSTFILE, srun --mpi=pmix --distribution=arbitrary starts the ranks),
USR1 before the time limit, requeue allowed."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import submitit

from jobs.placement import Allocation, allocation
from jobs.site import Site

SIGNAL_BEFORE_LIMIT_S = 300


def layout_of(config: str, overrides: list[str] | tuple[str, ...]) -> dict:
    """The rank layout of a run, as `python -m fedmpi.layout` prints it (raises fedmpi's ConfigError)."""
    from fedmpi.config import load_config
    from fedmpi.layout import build_layout

    return build_layout(load_config(config, list(overrides))).as_dict()


def allocation_for(layout: dict, site: Site) -> Allocation:
    slots = site.slots_per_node if site.slots_per_node > 0 else int(layout["world"])
    return allocation(layout, slots, gpus=not site.cpu)


def hostfile_lines(layout: dict, site: Site) -> list[str]:
    """Job-script lines that write the ranks' hostfile and point srun at it (removed when the job script ends)."""
    cap = 0 if site.cpu else site.gpus_per_node
    python = shlex.quote(site.python)
    return [
        'export SLURM_HOSTFILE="$(mktemp "${TMPDIR:-/tmp}/fedmpi-$SLURM_JOB_ID.XXXXXX.hosts")"',
        'trap \'rm -f "$SLURM_HOSTFILE"\' EXIT',
        f'{python} -m jobs.placement hostfile --layout {shlex.quote(json.dumps(layout))} '
        f'--hosts "$(scontrol show hostnames "$SLURM_JOB_NODELIST" | tr "\\n" " ")" '
        f'--tasks-per-node "$SLURM_TASKS_PER_NODE" --max-per-node {cap} > "$SLURM_HOSTFILE" || exit 1',
    ]


def make_executor(folder: str | Path, layout: dict, site: Site, name: str = "fedmpi",
                  array_parallelism: int | None = None) -> submitit.SlurmExecutor:
    alloc = allocation_for(layout, site)
    executor = submitit.SlurmExecutor(folder=folder, python=site.python)
    extra: dict = {"requeue": True,
                   # fedmpi.run checkpoints on USR1 (submitit's own signal, USR2, would requeue at once)
                   "signal": f"USR1@{SIGNAL_BEFORE_LIMIT_S}",
                   "gres": f"gpu:{alloc.tasks_per_node}" if alloc.gpus else "none"}
    if site.time:
        extra["time"] = site.time
    # time=None: no --time line (submitit's default is 5 minutes); the partition's default applies.
    params: dict = dict(job_name=name, time=None, nodes=alloc.nodes, ntasks_per_node=alloc.tasks_per_node,
                        setup=site.setup_lines() + hostfile_lines(layout, site),
                        srun_args=[f"--mpi={site.srun_mpi}", "--distribution=arbitrary", f"--ntasks={alloc.world}",
                                   "--kill-on-bad-exit=1"],
                        stderr_to_stdout=False, additional_parameters=extra)
    if site.partition:
        params["partition"] = site.partition
    if site.account:
        params["account"] = site.account
    if site.qos:
        params["qos"] = site.qos
    if site.cpus_per_task:
        params["cpus_per_task"] = site.cpus_per_task
    if array_parallelism:
        params["array_parallelism"] = array_parallelism
    executor.update_parameters(**params)
    return executor
