"""mpirun worker (4 ranks): cross-device runs of FedAvg and FedAvgM in float64 and FedAvgM in float32, each on 1,
2 and 3 trainer ranks, in one launch (one start-up of torch for nine runs). For each, world ranks 0..k run the real server and trainer roles over their
own MPI communicator and torch.distributed group; the other ranks only join the collective set-up calls.
Each run saves its final global model as OUT/<algorithm>-<dtype>-<k>.pt and logs under OUT/<algorithm>-<dtype>-<k>/.

usage: crossdevice_reduction.py OUT CONFIG [key=value ...]
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from fedmpi import comm
from fedmpi.config import load_config
from fedmpi.crossdevice.roles import run_cross_device
from fedmpi.roles.context import Context, Groups
from fedmpi.topology import build_layout


def main() -> int:
    out, config, overrides = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    world = comm.mpi_comm()
    rank = world.Get_rank()
    comm.init_torch_distributed("gloo")
    for algorithm, dtype in (("fedavg", "float64"), ("fedavgm", "float64"), ("fedavgm", "float32")):
        for k in (1, 2, 3):
            name = f"{algorithm}-{dtype}-{k}"
            cfg = load_config(config, [*overrides, f"fed.algorithm={algorithm}", f"clients.ranks={k}",
                                       f"run.dtype={dtype}",
                                       f"log.dir={out}", f"log.name={name}", f"run.save_final={out / name}.pt"])
            member = rank <= k
            sub = world.Split(0 if member else 1, key=rank)
            if member:
                (out / name).mkdir(parents=True, exist_ok=True)
                ctx = Context(cfg, build_layout(cfg), rank, Groups(None, None, None), sub, torch.device("cpu"),
                              getattr(torch, dtype))
                code = run_cross_device(ctx, out / name)   # ends with a barrier over the whole world
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
