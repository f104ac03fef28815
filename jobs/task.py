"""What each submitit task (one MPI rank) runs: `python -m fedmpi.run` in-process, under srun --mpi=pmix.

On exit 75 (stopped for preemption with a checkpoint written) rank 0 requeues the job and every rank waits
to be ended by that requeue, so that no rank leaves a result behind for an attempt that is not the last;
the requeued job runs the same task, which then passes --resume auto.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

EXIT_PREEMPTED = 75
REQUEUE_WAIT_S = 300.0


@dataclass(frozen=True)
class RunResult:
    """What a finished run reports: its exit status (0 done, 1 error, 2 bad config) and where it logged."""
    exit_status: int
    run_dir: str
    log: str
    job_id: str = ""
    rank: int = 0
    restarts: int = 0


@dataclass(frozen=True)
class FedmpiTask:
    """A picklable callable: `config` + `overrides` as fedmpi.run takes them, run from `workdir`."""
    config: str
    overrides: tuple[str, ...] = ()
    workdir: str = "."
    cpu: bool = False
    extra_args: tuple[str, ...] = field(default=())

    def argv(self, restarts: int) -> list[str]:
        args = ["--config", self.config, *self.extra_args]
        if restarts > 0 and "--resume" not in self.extra_args:
            args += ["--resume", "auto"]
        return args + (["run.device=cpu"] if self.cpu else []) + list(self.overrides)

    def run_dir(self) -> Path:
        """{log.dir}/{log.name}, resolved from the same config and overrides the run reads."""
        from fedmpi.config import load_config

        cfg = load_config(self.config, [o for o in self.overrides])
        return Path(self.workdir) / cfg.log.dir / cfg.log.name

    def __call__(self) -> RunResult:
        restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        rank = int(os.environ.get("SLURM_PROCID") or 0)
        job_id = os.environ.get("SLURM_JOB_ID", "")
        os.chdir(self.workdir)
        from fedmpi.run import main

        code = main(self.argv(restarts))
        sys.stdout.flush()
        sys.stderr.flush()
        if code == EXIT_PREEMPTED and job_id:
            if rank == 0:
                print(f"fedmpi: stopped for preemption with a checkpoint; requeueing job {job_id}", file=sys.stderr,
                      flush=True)
                subprocess.run(["scontrol", "requeue", job_id], check=False, timeout=60)
            time.sleep(REQUEUE_WAIT_S)
            raise RuntimeError(f"exit {EXIT_PREEMPTED} (preempted) but job {job_id} was not requeued within "
                               f"{REQUEUE_WAIT_S:.0f} s; resubmit with --resume auto")
        run_dir = self.run_dir()
        return RunResult(exit_status=int(code), run_dir=str(run_dir.resolve()), log=str((run_dir / "log.h5").resolve()),
                         job_id=job_id, rank=rank, restarts=restarts)
