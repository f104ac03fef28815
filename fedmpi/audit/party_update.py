"""Update inversion of a silo party's upload θ_k − Θ: K local SGD steps (with the party's local momentum) of
the margin loss over a batch, from Θ. The server knows Θ, K, the learning rate, the batch size and the head's
kind, scale and margin (the public configuration), but not the party's classifier, its labels or which images
each step drew. The attack therefore optimises beside the images a surrogate classifier W′ with one class per
image of the batch (CosFace's form: s·(cos − m) at the label), and simulates every step on the same batch
(Geiping et al. 2020, §5 with a batch that does not change between steps)."""
from __future__ import annotations

import torch

from .inversion import Inversion, invert, local_update_of


def margin_loss(embeddings: torch.Tensor, rows: torch.Tensor, labels: torch.Tensor, scale: float,
                margin: float) -> torch.Tensor:
    cosines = torch.nn.functional.normalize(embeddings, dim=1) @ torch.nn.functional.normalize(rows, dim=1).T
    cosines = cosines - margin * torch.nn.functional.one_hot(labels, rows.shape[0]).to(cosines)
    return torch.nn.functional.cross_entropy(scale * cosines, labels)


def invert_party_update(model: torch.nn.Module, observed: list, batch: int, image_shape, *, steps: int, lr: float,
                        momentum: float, scale: float, margin: float, iterations: int, restarts: int,
                        data_range: tuple, seed: int = 0, tv: float = 1e-4, weight_decay: float = 0.0,
                        correct=None) -> Inversion:
    """Reconstructions [batch, *image_shape] of the images behind `observed` (θ_K − Θ per trainable parameter of
    `model`, which holds Θ, in model.named_parameters() order); `weight_decay`, `correct`: the rule's local step
    (local_rules.py)."""
    generator = torch.Generator().manual_seed(seed)
    dtype = observed[0].dtype
    embedding = model(torch.zeros(2, *image_shape, dtype=dtype)).shape[1]
    rows = torch.randn(max(batch, 2), embedding, generator=generator, dtype=dtype)   # one class: no gradient
    labels = torch.arange(batch)
    model.train()
    simulate = local_update_of(model, lambda out, y: margin_loss(out, rows, y, scale, margin), labels, lr, steps,
                               momentum=momentum, weight_decay=weight_decay, correct=correct)
    return invert(simulate, observed, (batch, *image_shape), iterations=iterations, restarts=restarts, tv=tv,
                  data_range=data_range, seed=seed, unknowns=[rows])
