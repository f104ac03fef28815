"""mpirun worker (4 ranks): cross-device runs of FedAvg and FedAvgM in float64 and FedAvgM in float32, each on 1,
2 and 3 trainer ranks; then the rules with extra payloads or trainer state (SCAFFOLD, MIME-lite, PFM: STATEFUL)
on 2 trainer ranks with one-batch clients (5 images) and a checkpoint every round, SCAFFOLD once more with each
rank's clients trained as one batch (clients.cohort=vectorised), and SCAFFOLD and PFM once more resumed from the
checkpoint after round 2 (OUT/<rule>-resumed); all in one launch (one start-up of torch).
For each, world ranks 0..k run the real server and trainer roles over their own MPI communicator and
torch.distributed group; the other ranks only join the collective set-up calls.
Each run saves its final global model as OUT/<name>.pt (name: <algorithm>-<dtype>-<k>, or the STATEFUL key) and
logs under OUT/<name>/.

usage: crossdevice_reduction.py OUT CONFIG [key=value ...]
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from fedmpi import comm
from fedmpi.config import load_config
from fedmpi.crossdevice.roles import run_cross_device
from fedmpi.core.build import build_parts
from fedmpi.core.context import Context, Control, Groups
from fedmpi.store.checkpoint import ResumePoint, round_folder_name
from fedmpi.layout import build_layout


# name: (overrides, trainer ranks, resume from the checkpoint of this run after round 2)
STATEFUL = {"scaffold": (["fed.algorithm=scaffold"], 2, None),
            "mime_lite": (["fed.algorithm=mime_lite"], 2, None),
            "pfm": (["fed.algorithm=pfm", "optim.momentum=0.9"], 2, None),
            "scaffold-vectorised": (["fed.algorithm=scaffold", "clients.cohort=vectorised"], 2, None),
            "scaffold-resumed": (["fed.algorithm=scaffold"], 2, "scaffold"),
            "pfm-resumed": (["fed.algorithm=pfm", "optim.momentum=0.9"], 2, "pfm")}
ONE_STEP = ["clients.images=5", "checkpoint.every=1", "checkpoint.keep=3"]


def runs():
    for algorithm, dtype in (("fedavg", "float64"), ("fedavgm", "float64"), ("fedavgm", "float32")):
        for k in (1, 2, 3):
            yield f"{algorithm}-{dtype}-{k}", [f"fed.algorithm={algorithm}", f"run.dtype={dtype}"], k, None
    for name, (extra, k, resume_from) in STATEFUL.items():
        yield name, [*ONE_STEP, *extra, "run.dtype=float64"], k, resume_from


def main() -> int:
    out, config, overrides = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    world = comm.mpi_comm()
    rank = world.Get_rank()
    comm.init_torch_distributed("gloo")
    for name, extra, k, resume_from in runs():
        cfg = load_config(config, [*overrides, *extra, f"clients.ranks={k}", f"log.dir={out}", f"log.name={name}",
                                   f"run.save_final={out / name}.pt"])
        resume = None
        if resume_from:
            resume = ResumePoint(out / resume_from / "ckpt" / round_folder_name(2), round=2, step=2)
        member = rank <= k
        sub = world.Split(0 if member else 1, key=rank)
        if member:
            (out / name).mkdir(parents=True, exist_ok=True)
            dtype = getattr(torch, cfg.run.dtype)
            cpu = torch.device("cpu")
            ctx = Context(build_layout(cfg), rank, Groups(None, None, None), Control(sub, cfg.run.collective_timeout_s),
                          cpu, dtype)
            # ends with a barrier over the whole world
            code = run_cross_device(cfg, ctx, build_parts(cfg, cpu, dtype), out / name, resume)
        else:
            comm.new_group(list(range(k + 1)))         # the run's group: every world rank creates it
            comm.barrier(what="closing barrier (every rank)", timeout_s=cfg.run.collective_timeout_s)
            code = 0
        sub.Free()
        if code:
            return code
    return 0

if __name__ == "__main__":
    sys.exit(comm.run_guarded("crossdevice-reduction", main))
