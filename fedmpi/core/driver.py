"""Running a role's rounds: resume, the rounds with the checkpointer, the closing barrier."""
from __future__ import annotations

from fedmpi import comm
from fedmpi.core import signals
from fedmpi.core.context import Context
from fedmpi.store.checkpoint import Checkpointer, checkpoint_dir


def drive(role, cfg, ctx: Context, run_dir, resume) -> int:
    """Run a Server or Trainer: take its state from the checkpoint to resume (if any), run its rounds with the
    checkpointer, and meet every other rank at the closing barrier. Returns the exit status (75: preempted)."""
    start = role.load_checkpoint(resume.folder) if resume else 0
    checkpointer = Checkpointer(ctx.control.mpi, checkpoint_dir(cfg, run_dir), cfg, ctx.layout, signals.agree)
    code = role.run(start, checkpointer)
    comm.barrier(what="closing barrier (every rank)", timeout_s=ctx.control.timeout_s)
    return code
