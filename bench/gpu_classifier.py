"""mpirun worker for bench/gpu_check.py: the sharded ArcFace classifier on CUDA against the full one on CPU.

    mpirun -n 2 python bench/gpu_classifier.py [--classes 1000] [--embedding 512] [--batch 64] [--rtol 1e-4]

Every rank joins torch.distributed the way a run does (fedmpi.comm: NCCL with CUDA, gloo for a group whose
ranks share a GPU), holds its block of class centres on its GPU (models/sharded.py) and its part of the party
batch, and computes the party-batch mean loss and its gradients in fp32. Every rank also computes the reference
on CPU: the full classifier over the whole party batch (same centres, same seed). The sharded loss must equal the
reference loss, its weight gradient the reference's rows of this block, and its embeddings' gradient the party
size times the reference's for this rank's rows, each within rtol of the reference's largest magnitude.
Prints one line per rank; exits non-zero on a mismatch.
"""
from __future__ import annotations

import argparse
import sys

import torch
import torch.distributed as dist

from fedmpi import comm
from fedmpi.models import build_classifier


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--embedding", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64, help="per rank")
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False   # fp32 means fp32 here
    torch.backends.cudnn.allow_tf32 = False
    comm.init_torch_distributed(None, timeout_s=120)
    device = comm.device()
    world = comm.mpi_comm().Get_size()
    rank = comm.mpi_comm().Get_rank()
    group = comm.new_group(range(world))

    g = torch.Generator().manual_seed(args.seed)
    total = args.batch * world
    embeddings = torch.randn(total, args.embedding, generator=g)
    labels = torch.randint(0, args.classes, (total,), generator=g)
    own = slice(rank * args.batch, (rank + 1) * args.batch)

    reference = build_classifier(args.classes, args.embedding, kind="arcface", seed=args.seed)
    ref_embeddings = embeddings.clone().requires_grad_(True)
    ref_loss = reference(ref_embeddings, labels)
    ref_loss.backward()

    sharded = build_classifier(args.classes, args.embedding, kind="arcface", group=group, mode="sharded",
                               seed=args.seed).to(device)
    mine = embeddings[own].to(device).requires_grad_(True)
    loss = sharded(mine, labels[own].to(device))
    loss.backward()

    start, end = sharded.class_start, sharded.class_end
    pairs = {"loss": (loss.detach().cpu().reshape(1), ref_loss.detach().reshape(1)),
             "weight grad": (sharded.weight.grad.cpu(), reference.weight.grad[start:end]),
             "embedding grad": (mine.grad.cpu(), world * ref_embeddings.grad[own])}
    failed, parts = [], []
    for name, (got, want) in pairs.items():
        err = (got - want).abs().max().item()
        bound = args.rtol * max(want.abs().max().item(), 1e-12)
        parts.append(f"{name} max |diff| {err:.2e} (bound {bound:.2e})")
        if not err <= bound:
            failed.append(name)
    backend = dist.get_backend(group)
    print(f"rank {rank} on {device} ({backend} group), classes {start}..{end - 1}: " + "; ".join(parts)
          + (f"  MISMATCH: {', '.join(failed)}" if failed else "  ok"), flush=True)
    comm.shutdown()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
