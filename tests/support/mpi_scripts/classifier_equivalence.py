"""mpirun worker: the sharded margin classifier against a single-rank full classifier (float64, gloo).

Every rank builds the whole party batch and the full class-centre matrix itself, computes the reference loss
and gradients with plain autograd (acos form of the margin, F.cross_entropy), and checks its shard:
  loss == L (mean over the party batch), weight.grad == ∂L/∂W[start:end], embeddings.grad == n · ∂L/∂E_own.
Also: shard shapes (ceil/floor of C/n), unequal per-rank batches, extra negative cones (PrivacyFace's received
clusters: each counted once in the party's softmax, whatever the number of shards), sampled negatives (all positives kept; the
loss equals the full softmax restricted to the union of sampled columns). Exits non-zero on any mismatch.

With --train-steps N it then runs classifier_training's check (sharded vs replicated training) in the same
launch, saving one start-up of torch on every rank; with --party-gradients, party_gradients_check's (the party's
mean gradient with run.ddp_compression).

usage: classifier_equivalence.py [--tol 1e-9] [--train-steps 0] [--party-gradients]
"""
from __future__ import annotations

import argparse
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

from fedmpi import comm
from fedmpi.models import build_classifier
from fedmpi.models.class_centres import init_class_centres

EMBEDDING = 16
SCALE = 64.0


def reference_loss(embeddings, labels, centres, kind, margin, columns=None, cones=None):
    """Plain single-rank loss: normalise, cos, margin on the target, s·logits, mean cross-entropy; `cones`
    [(p, α)]: one more negative logit each, s·cos(max(arccos(p̂·f̂) − α, 0)) (PrivacyFace, spec §3.4)."""
    cos = F.normalize(embeddings, dim=1) @ F.normalize(centres, dim=1).T
    if columns is not None:  # softmax over a subset of classes (sampled negatives)
        cos = cos[:, columns]
        labels = torch.searchsorted(columns, labels)
    cos = cos.clamp(-1.0, 1.0)
    target = cos.gather(1, labels[:, None]).squeeze(1)
    if kind == "arcface":
        theta = torch.acos(target)
        moved = torch.where(theta + margin <= math.pi, torch.cos(theta + margin),
                            target - margin * math.sin(margin))
    else:
        moved = target - margin
    one_hot = F.one_hot(labels, cos.shape[1]).bool()
    logits = torch.where(one_hot, moved[:, None], cos) * SCALE
    if cones is not None:
        unit = F.normalize(embeddings, dim=1)
        angle = torch.acos((unit @ F.normalize(cones[0], dim=1).T).clamp(-1.0, 1.0))
        logits = torch.cat([logits, SCALE * torch.cos((angle - cones[1]).clamp_min(0.0))], dim=1)
    return F.cross_entropy(logits, labels)


def cone_rows(seed: int) -> torch.Tensor:
    """Three cones [p | α | 1] and a row holding none (last value 0), which the classifier must leave out."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.zeros(4, EMBEDDING + 2, dtype=torch.float64)
    rows[:, :EMBEDDING] = torch.randn(4, EMBEDDING, generator=g, dtype=torch.float64)
    rows[:, EMBEDDING] = torch.tensor([0.3, 1.2, 0.8, 0.5])
    rows[:3, EMBEDDING + 1] = 1.0
    return rows


def party_batch(sizes, num_classes, seed):
    """Embeddings for the whole party: random, plus a few placed opposite their centre (θ + m > π)."""
    g = torch.Generator().manual_seed(seed)
    total = sum(sizes)
    labels = torch.randint(0, num_classes, (total,), generator=g)
    embeddings = torch.randn(total, EMBEDDING, generator=g, dtype=torch.float64)
    centres = init_class_centres(seed, 0, num_classes, EMBEDDING, torch.float64)
    for i in range(0, total, 3):
        embeddings[i] = -centres[labels[i]] * 50 + 0.01 * embeddings[i]
    for i in range(1, total, 3):
        embeddings[i] = centres[labels[i]] * 50 + 0.3 * embeddings[i]
    return embeddings, labels, centres


def check(name, got, want, tol):
    err = (got - want).abs().max().item() if got.numel() else 0.0
    if not err <= tol:
        raise AssertionError(f"{name}: max |diff| {err:.3e} > {tol:.1e}")
    return err


def run_case(group, kind, num_classes, sizes, seed, tol, cones: bool = False):
    """With `cones`: extra negative cones, counted once in the party's softmax whatever the shards."""
    from fedmpi.models.cone_negatives import valid_cones

    n, rank = dist.get_world_size(group), dist.get_rank(group)
    embeddings, labels, centres = party_batch(sizes, num_classes, seed)
    table = cone_rows(seed) if cones else None
    if cones:   # features inside a cone too (its logit saturates at s there)
        embeddings[2] = table[0, :EMBEDDING] * 7
    start = sum(sizes[:rank])
    own = slice(start, start + sizes[rank])

    classifier = build_classifier(num_classes, EMBEDDING, kind=kind, group=group, mode="sharded", seed=seed,
                                  dtype=torch.float64)
    rows = classifier.class_end - classifier.class_start
    if rows not in (num_classes // n, -(-num_classes // n)) or classifier.weight.shape != (rows, EMBEDDING):
        raise AssertionError(f"shard holds {tuple(classifier.weight.shape)} for C={num_classes}, n={n}")
    classifier.negatives = valid_cones(table)
    mine = embeddings[own].clone().requires_grad_(True)
    loss = classifier(mine, labels[own])
    loss.backward()
    classifier.sync_grads()

    full = centres.clone().requires_grad_(True)
    everyone = embeddings.clone().requires_grad_(True)
    want = reference_loss(everyone, labels, full, kind, classifier.head.margin,
                          cones=(table[:3, :EMBEDDING], table[:3, EMBEDDING]) if cones else None)
    want.backward()
    block = slice(classifier.class_start, classifier.class_end)
    worst = max(
        check(f"{kind} C={num_classes} sizes={sizes} centres", classifier.weight.detach(), centres[block], 0.0),
        check(f"{kind} C={num_classes} sizes={sizes} loss", loss.detach(), want.detach(), tol),
        check(f"{kind} C={num_classes} sizes={sizes} centre grads", classifier.weight.grad, full.grad[block], tol),
        check(f"{kind} C={num_classes} sizes={sizes} embedding grads", mine.grad, n * everyone.grad[own], tol),
    )
    return worst


def run_sampled_case(group, kind, num_classes, sizes, seed, tol):
    """sample_rate < 1: all positives kept; loss/grads equal the full softmax over the sampled columns."""
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    embeddings, labels, centres = party_batch(sizes, num_classes, seed)
    start = sum(sizes[:rank])
    own = slice(start, start + sizes[rank])
    classifier = build_classifier(num_classes, EMBEDDING, kind=kind, group=group, mode="sharded", seed=seed,
                                  sample_rate=0.3, dtype=torch.float64)
    mine = embeddings[own].clone().requires_grad_(True)
    loss = classifier(mine, labels[own])
    loss.backward()
    local = classifier.last_sampled + classifier.class_start
    parts = [None] * n
    dist.all_gather_object(parts, local.tolist(), group=group)
    columns = torch.tensor(sorted(c for part in parts for c in part))
    positives = set(labels.tolist())
    if not positives <= set(columns.tolist()):
        raise AssertionError(f"sampled columns {columns.tolist()} miss positives {sorted(positives)}")
    full = centres.clone().requires_grad_(True)
    everyone = embeddings.clone().requires_grad_(True)
    want = reference_loss(everyone, labels, full, kind, classifier.head.margin, columns)
    want.backward()
    block = slice(classifier.class_start, classifier.class_end)
    unsampled = torch.ones(classifier.weight.shape[0], dtype=torch.bool)
    unsampled[classifier.last_sampled] = False
    if torch.count_nonzero(classifier.weight.grad[unsampled]).item():
        raise AssertionError("rows not sampled received a gradient")
    return max(
        check(f"sampled {kind} C={num_classes} loss", loss.detach(), want.detach(), tol),
        check(f"sampled {kind} C={num_classes} centre grads", classifier.weight.grad, full.grad[block], tol),
        check(f"sampled {kind} C={num_classes} embedding grads", mine.grad, n * everyone.grad[own], tol),
    )


def main(tol: float, train_steps: int, party_gradients: bool = False) -> int:
    comm.init_torch_distributed("gloo")
    world = dist.get_world_size()
    party = comm.new_group(range(world))
    worst = 0.0
    for kind in ("arcface", "cosface"):
        for num_classes in (10, 11, 37):
            worst = max(worst, run_case(party, kind, num_classes, [5] * world, seed=num_classes, tol=tol))
        uneven = [3 + r for r in range(world)]
        worst = max(worst, run_case(party, kind, 11, uneven, seed=7, tol=tol))
        worst = max(worst, run_case(party, kind, 11, uneven, seed=5, tol=tol, cones=True))
        worst = max(worst, run_sampled_case(party, kind, 300, [6] * world, seed=3, tol=tol))
    if dist.get_rank() == 0:
        print(f"classifier equivalence ok on {world} ranks, worst |diff| {worst:.2e}")
    if train_steps:
        from classifier_training import compare_training

        worst = compare_training(party, train_steps, tol)
        if dist.get_rank() == 0:
            print(f"sharded training follows replicated on {world} ranks, worst |diff| {worst:.2e}")
    if party_gradients:
        from party_gradients_check import check_ddp_compression, check_party_gradients

        check_party_gradients(party)
        worst = check_ddp_compression(party)
        if dist.get_rank() == 0:
            print(f"party gradients ok on {world} ranks (exact, fp16, bf16; DDP's compression hooks within "
                  f"{worst:.1e} of the mean)")
    comm.shutdown()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tol", type=float, default=1e-9)
    parser.add_argument("--train-steps", type=int, default=0)
    parser.add_argument("--party-gradients", action="store_true", help="also party_gradients_check.py's checks")
    args = parser.parse_args()
    raise SystemExit(comm.run_guarded("classifier test",
                                      lambda: main(args.tol, args.train_steps, args.party_gradients)))
