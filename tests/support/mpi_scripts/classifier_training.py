"""mpirun worker: a party trained with the sharded classifier follows the same run with a replicated one.

All ranks form one party: tiny IResNet (ir18, width 0.125, input 16) in DDP over the party group, SGD with
momentum 0.9 and weight decay 5e-4 on backbone and classifier, float64, fixed random inputs, same seeds.
After every step the backbone parameters, BN buffers, the class-centre block and the party loss must agree
to `tol`. Exits non-zero on any mismatch.

usage: classifier_training.py [--steps 3] [--tol 1e-9]
"""
from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from fedmpi import comm
from fedmpi.models import build_classifier, iresnet

CLASSES = 11
EMBEDDING = 32
BATCH = 4


def train(party, mode: str, steps: int, kind: str):
    """Returns per-step (party loss, backbone state, full class-centre matrix gathered from the shards)."""
    rank = dist.get_rank(party)
    torch.manual_seed(0)
    backbone = iresnet("ir18", embedding_size=EMBEDDING, input_size=16, width=0.125).double()
    model = DistributedDataParallel(backbone, process_group=party)
    classifier = build_classifier(CLASSES, EMBEDDING, kind=kind, group=party, mode=mode, seed=5,
                                  dtype=torch.float64)
    optimizer = torch.optim.SGD([*model.parameters(), *classifier.parameters()], lr=0.1, momentum=0.9,
                                weight_decay=5e-4)
    history = []
    for step in range(steps):
        g = torch.Generator().manual_seed(1000 * step + rank)
        images = torch.randn(BATCH, 3, 16, 16, generator=g, dtype=torch.float64)
        labels = torch.randint(0, CLASSES, (BATCH,), generator=g)
        optimizer.zero_grad(set_to_none=True)
        loss = classifier(model(images), labels)
        loss.backward()
        classifier.sync_grads()
        optimizer.step()
        party_loss = loss.detach().clone()
        if mode == "replicated":  # per-rank means -> the party mean (equal batches)
            dist.all_reduce(party_loss, group=party)
            party_loss /= dist.get_world_size(party)
        centres = classifier.weight.detach().clone()
        if mode == "sharded":
            blocks = [None] * dist.get_world_size(party)
            dist.all_gather_object(blocks, centres, group=party)
            centres = torch.cat(blocks)
        state = {k: v.detach().clone() for k, v in backbone.state_dict().items()}
        history.append((party_loss, state, centres))
    return history, classifier


def check(name, got, want, tol):
    """|got - want| <= tol, relative to the magnitude where it exceeds 1 (BN running variances reach 1e3)."""
    err = ((got.double() - want.double()).abs() / want.double().abs().clamp_min(1.0)).max().item()
    if not err <= tol:
        raise AssertionError(f"{name}: max |diff| {err:.3e} > {tol:.1e} (relative above 1)")
    return err


def compare_training(party, steps: int, tol: float) -> float:
    worst = 0.0
    for kind in ("arcface", "cosface"):
        replicated, _ = train(party, "replicated", steps, kind)
        sharded, classifier = train(party, "sharded", steps, kind)
        n = dist.get_world_size(party)
        rows = classifier.weight.shape[0]
        if rows not in (CLASSES // n, -(-CLASSES // n)):
            raise AssertionError(f"sharded rank holds {rows} of {CLASSES} centres over {n} ranks")
        for step, ((loss_r, state_r, centres_r), (loss_s, state_s, centres_s)) in enumerate(
                zip(replicated, sharded)):
            worst = max(worst, check(f"{kind} step {step} loss", loss_s, loss_r, tol))
            worst = max(worst, check(f"{kind} step {step} class centres", centres_s, centres_r, tol))
            for key, value in state_r.items():
                worst = max(worst, check(f"{kind} step {step} backbone {key}", state_s[key], value, tol))
        if replicated[-1][0].item() == replicated[0][0].item():
            raise AssertionError("training did not change the loss: the comparison would be vacuous")
    return worst


def main(steps: int, tol: float) -> int:
    comm.init_torch_distributed("gloo")
    party = comm.new_group(range(dist.get_world_size()))
    worst = compare_training(party, steps, tol)
    if dist.get_rank() == 0:
        print(f"sharded training follows replicated on {dist.get_world_size()} ranks, worst |diff| {worst:.2e}")
    comm.shutdown()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tol", type=float, default=1e-9)
    args = parser.parse_args()
    raise SystemExit(comm.run_guarded("classifier training test", lambda: main(args.steps, args.tol)))
