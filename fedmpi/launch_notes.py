"""What a launch says before its first round (rank 0): the plan in rounds and epochs of the parties' data, and,
for a `--resume` of a run that has done all its rounds, that it is finished and how to make it longer."""
from __future__ import annotations

import shlex
import sys


def finished_message(cfg, resume, run_dir, world_size: int) -> str:
    """A resume whose checkpoint holds every round of this config: nothing to run; the override and flag that
    add rounds (optim.epochs: the schedule's length, docs/DATA.md's formula)."""
    key, value = ("clients.rounds", 2 * cfg.clients.rounds) if cfg.cross_device else ("optim.epochs",
                                                                                        2 * cfg.optim.epochs)
    kept = [a for a in sys.argv[1:] if a != "--allow-config-changes" and not a.startswith(f"{key}=")]
    command = " ".join(shlex.quote(a) for a in kept)
    return (f"{run_dir}: finished: all {cfg.rounds} rounds are done (checkpoint {resume.folder}); nothing to run. "
            f"To train longer, raise {key} and add --allow-config-changes: `mpirun -n {world_size} python -m "
            f"fedmpi.run {command} {key}={value} --allow-config-changes` (the change is recorded in the log)")


def finished(cfg, resume, run_dir, mpi) -> bool:
    """Whether the checkpoint to resume holds every round already (rank 0 then says so and how to extend it)."""
    if resume is None or resume.round < cfg.rounds:
        return False
    if mpi.Get_rank() == 0:
        print(finished_message(cfg, resume, run_dir, mpi.Get_size()), flush=True)
    return True


def description_sizes(cfg, layout, description: dict) -> dict[str, tuple[int, int]]:
    """{party: (training images, images per step)} from the launch's data description (fedmpi.run.prepare_data)."""
    from fedmpi.layout import rank_batch

    sizes = {}
    for party in layout.parties:
        keys = [k for k in description if k == party.name or k.startswith(f"{party.name}.")]
        images = sum(description[k]["images"] - cfg.data.heldout * description[k]["identities"] for k in keys)
        sizes[party.name] = (images, len(party.ranks) * rank_batch(cfg, party.name))
    return sizes


def say_plan(cfg, layout, description: dict) -> None:
    from fedmpi.config.epochs import plan_line

    if not cfg.cross_device and description:
        print(plan_line(cfg, description_sizes(cfg, layout, description)), flush=True)
