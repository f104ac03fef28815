"""Two processes over gloo (torch.distributed, TCP on this host): rank 0 sends SENT float32 values, rank 1 receives
into a marked buffer of EXPECTED values (comm/message_end.py) and prints what it found. Usage:
    python gloo_message_sizes.py SENT EXPECTED PORT"""
from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fedmpi.comm.message_end import mark_end, reached_end


def exchange(rank: int, sent: int, expected: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    if rank == 0:
        dist.send(torch.arange(1, sent + 1, dtype=torch.float32), dst=1, tag=2)
    else:
        buffer = torch.full((expected,), 7.0)
        mark_end(buffer)
        dist.irecv(buffer, src=0, tag=2).wait()
        print(f"received {buffer[:-1].tolist()} reached_end={reached_end(buffer)}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sent, expected, port = map(int, sys.argv[1:4])
    mp.spawn(exchange, args=(sent, expected, port), nprocs=2, join=True)
