"""Model-parallel margin classifier: a party's class centres split in contiguous blocks across its ranks.

Forward, on every rank of the group: all-gather the (normalised) embeddings and the labels, cosine logits
against the local block, the margin on target logits that live here, and a softmax cross-entropy whose
normaliser is assembled across ranks (all-reduce of the row max, of the sum of exponentials and of the target
term). Every rank returns the same L = mean loss over the party's whole batch.

Backward: each rank's block gets ∂L/∂(block) locally; the gathered-embedding gradients are summed over the
group and each rank keeps its own rows, times the group size n. The party's gradient average
(silo/party_gradients.py, as DDP would) then averages backbone gradients over the n ranks, which gives
∂L/∂θ — the same backbone gradient as a replicated classifier with per-rank means.

Extra negative cones (`negatives`, PrivacyFace's received clusters, models/cone_negatives.py) add their logits on
the group's first rank only, so that each counts once in the normaliser assembled across ranks.

With group None (one rank) it is the plain classifier: no collectives, all classes local.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .class_centres import init_class_centres, shard_bounds
from .cone_negatives import cone_logits
from .heads import check_batch, check_label_range, margin_logits
from .partial_fc import sample_columns


def group_size(group) -> int:
    return 1 if group is None else dist.get_world_size(group)


def _gather_sizes(batch: int, device: torch.device, group) -> list[int]:
    mine = torch.tensor([batch], dtype=torch.int64, device=device)
    sizes = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(sizes, mine, group=group)
    return torch.cat(sizes).tolist()        # one host sync for all ranks' sizes


def _all_gather_rows(local: torch.Tensor, sizes: list[int], group) -> torch.Tensor:
    """Concatenate every rank's rows (rank order); ranks may hold different row counts."""
    width = max(sizes)
    padded = local.contiguous()
    if local.shape[0] < width:
        padded = torch.cat([padded, padded.new_zeros((width - local.shape[0],) + tuple(local.shape[1:]))])
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded, group=group)
    return torch.cat([part[:size] for part, size in zip(parts, sizes)])


class _GatherEmbeddings(torch.autograd.Function):
    """All-gather forward; backward sums the gathered gradient over the group, keeps own rows, × n (for the party's average)."""

    @staticmethod
    def forward(ctx, local, sizes, rank, group):
        ctx.sizes, ctx.rank, ctx.group = sizes, rank, group
        return _all_gather_rows(local, sizes, group)

    @staticmethod
    def backward(ctx, grad):
        total = grad.contiguous().clone()
        dist.all_reduce(total, group=ctx.group)
        start = sum(ctx.sizes[:ctx.rank])
        own = total[start:start + ctx.sizes[ctx.rank]]
        return own * len(ctx.sizes), None, None, None


class _ShardedSoftmaxCrossEntropy(torch.autograd.Function):
    """Mean softmax cross-entropy over logits whose columns are spread across the group.

    target_rows/target_cols: the samples whose target class is a local column, and that column.
    """

    @staticmethod
    def forward(ctx, logits, target_rows, target_cols, group):
        samples = logits.shape[0]
        row_max = logits.max(dim=1).values
        if group is not None:
            dist.all_reduce(row_max, op=dist.ReduceOp.MAX, group=group)
        exp = (logits - row_max[:, None]).exp_()
        sums = logits.new_zeros(2, samples)  # [sum of exponentials, shifted target logit]
        sums[0] = exp.sum(dim=1)
        sums[1].index_put_((target_rows,), logits[target_rows, target_cols] - row_max[target_rows])
        if group is not None:
            dist.all_reduce(sums, group=group)
        loss = (sums[0].log() - sums[1]).mean()
        probs = exp.div_(sums[0][:, None])
        ctx.save_for_backward(probs, target_rows, target_cols)
        return loss

    @staticmethod
    def backward(ctx, grad):
        probs, target_rows, target_cols = ctx.saved_tensors
        per_sample = grad / probs.shape[0]
        grad_logits = probs * per_sample
        grad_logits.index_put_((target_rows, target_cols), -per_sample, accumulate=True)
        return grad_logits, None, None, None


class ShardedClassifier(nn.Module):
    """This rank's block [class_start, class_end) of the party's class centres, with its share of the loss."""

    def __init__(self, num_classes: int, embedding_size: int, head, group=None, sample_rate: float = 1.0,
                 seed: int = 0, dtype: torch.dtype = torch.float32):
        super().__init__()
        ranks = group_size(group)
        rank = 0 if group is None else dist.get_rank(group)
        if rank < 0:
            raise ValueError("this rank is not a member of the classifier's process group")
        if num_classes < ranks:
            raise ValueError(f"sharded classifier needs at least one class per rank: {num_classes} classes "
                             f"over {ranks} ranks")
        self.group, self.ranks, self.rank = group, ranks, rank
        self.head, self.num_classes, self.embedding_size = head, num_classes, embedding_size
        self.sample_rate, self.seed = float(sample_rate), int(seed)
        self.class_start, self.class_end = shard_bounds(num_classes, ranks, rank)
        self.weight = nn.Parameter(init_class_centres(seed, self.class_start, self.class_end, embedding_size,
                                                      dtype))
        if self.sample_rate < 1.0:
            self.register_buffer("sample_step", torch.zeros((), dtype=torch.int64))
        # the host's copy of sample_step, read from the buffer once after each load (not once per step)
        self._host_step: int | None = None
        self.register_load_state_dict_post_hook(lambda module, keys: setattr(module, "_host_step", None))
        self.last_sampled: torch.Tensor | None = None  # local rows used by the latest sampled step
        # extra negative cones (PrivacyFace: other parties' clusters), [Q, d + 2] valid rows, or None; their logits
        # join the softmax on the group's first rank only, so that each counts once in the party's normaliser
        self.negatives: torch.Tensor | None = None

    def extra_repr(self) -> str:
        return (f"{self.head.kind} s={self.head.scale} m={self.head.margin}, classes [{self.class_start}, "
                f"{self.class_end}) of {self.num_classes} on rank {self.rank}/{self.ranks}, "
                f"sample_rate={self.sample_rate}")

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        labels = check_batch(embeddings, labels, self.embedding_size)
        with torch.autocast(device_type=embeddings.device.type, enabled=False):
            normalised = F.normalize(embeddings.to(self.weight.dtype), dim=1)
            if self.group is None:
                all_embeddings, all_labels = normalised, labels
            else:
                sizes = _gather_sizes(labels.shape[0], labels.device, self.group)
                all_embeddings = _GatherEmbeddings.apply(normalised, sizes, self.rank, self.group)
                all_labels = _all_gather_rows(labels, sizes, self.group)
            if all_labels.device.type == "cpu":   # on a GPU the trainer checks its labels on the host
                check_label_range(all_labels, self.num_classes)
            target_rows = ((all_labels >= self.class_start) & (all_labels < self.class_end)).nonzero().squeeze(1)
            target_cols = all_labels[target_rows] - self.class_start
            centres = self.weight
            if self.sample_rate < 1.0 and self.training:
                sampled = sample_columns(target_cols, centres.shape[0], self.sample_rate, self.seed,
                                         self._next_sample_step(), self.rank)
                self.last_sampled = sampled
                centres = centres[sampled]
                target_cols = torch.searchsorted(sampled, target_cols)
            cos = F.linear(all_embeddings, F.normalize(centres, dim=1)).clamp(-1.0, 1.0)
            logits = margin_logits(cos, target_rows, target_cols, self.head)
            if self.negatives is not None and self.rank == 0:
                logits = torch.cat([logits, cone_logits(all_embeddings, self.negatives, self.head.scale)], dim=1)
            return _ShardedSoftmaxCrossEntropy.apply(logits, target_rows, target_cols, self.group)

    def _next_sample_step(self) -> int:
        if self._host_step is None:
            self._host_step = int(self.sample_step)
        step = self._host_step
        self._host_step += 1
        self.sample_step += 1
        return step

    def sync_grads(self) -> None:
        """Nothing to do: each block's gradient is already ∂L/∂(block)."""
