"""Inverting Gradients [Geiping et al., NeurIPS 2020]: find inputs x′ whose gradient (or FedAvg local update)
matches the observed one.

Objective (§4): 1 − ⟨s(x′), g⟩ / (‖s(x′)‖ ‖g‖) + α·TV(x′), the cosine over all parameters at once, where s(x′)
is what the attacker simulates: the gradient ∇_θ L(x′, y) at Θ, or (§5, FedAvg) θ_K − Θ after K differentiable
local SGD steps from Θ with the known learning rate (torch.func.functional_call keeps the steps on the graph).
Adam on x′ with the sign of its gradient, the step size cut by 10 at 3/8, 5/8 and 7/8 of the iterations,
pixels clamped to the data's range after each step, several random restarts keeping the lowest objective.
Labels are known or read off the last layer first (analytic.label_from_last_layer).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch.func import functional_call

Simulate = Callable[[torch.Tensor], list]


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Mean absolute difference of neighbouring pixels along height and width, x [N, C, H, W]."""
    return ((x[..., 1:, :] - x[..., :-1, :]).abs().mean() + (x[..., :, 1:] - x[..., :, :-1]).abs().mean())


def cosine_distance(simulated: Sequence[torch.Tensor], observed: Sequence[torch.Tensor]) -> torch.Tensor:
    """1 − cos between two lists of tensors taken as one vector each."""
    dot = sum((s * o).sum() for s, o in zip(simulated, observed))
    norm_s = torch.sqrt(sum(s.pow(2).sum() for s in simulated))
    norm_o = torch.sqrt(sum(o.pow(2).sum() for o in observed))
    return 1.0 - dot / (norm_s * norm_o).clamp_min(1e-30)


def _parameters(model: torch.nn.Module) -> dict:
    """The trainable parameters (what an upload moves); functional_call takes the frozen ones from the model."""
    return {name: p.detach() for name, p in model.named_parameters() if p.requires_grad}


def gradient_of(model: torch.nn.Module, loss_fn, labels: torch.Tensor) -> Simulate:
    """x′ -> ∇_θ L(model(x′), labels) at the model's parameters, on the graph (one gradient step's upload)."""
    params = _parameters(model)
    buffers = dict(model.named_buffers())

    def simulate(x: torch.Tensor) -> list:
        theta = {name: p.clone().requires_grad_() for name, p in params.items()}
        loss = loss_fn(functional_call(model, (theta, buffers), (x,)), labels)
        return list(torch.autograd.grad(loss, list(theta.values()), create_graph=True))
    return simulate


def local_update_of(model: torch.nn.Module, loss_fn, labels: torch.Tensor, lr: float, steps: int,
                    batches: Sequence[torch.Tensor] | None = None, momentum: float = 0.0, *,
                    weight_decay: float = 0.0, correct=None, head: Sequence[torch.Tensor] = ()) -> Simulate:
    """x′ -> θ_K − Θ after `steps` SGD steps (heavy-ball momentum if given) from the model's parameters Θ, each
    on x′[batches[k]] (all of x′ when batches is None), differentiable in x′ ([G] §5). The step is the rules'
    (algorithms/base.py): g + weight_decay·θ + correct(name, θ, Θ) (FedProx's μ(θ − Θ), PFM's β·M/K), then
    momentum SGD. `head`: tensors trained beside θ by plain SGD at lr (a device client's class rows), read by
    loss_fn(out, labels, *head); their values at the call are where every simulation starts."""
    if steps < 1 or lr <= 0:
        raise ValueError(f"local update needs steps >= 1 and lr > 0, got steps={steps}, lr={lr}")
    if batches is not None and len(batches) != steps:
        raise ValueError(f"{len(batches)} batches given for {steps} local steps")
    start = _parameters(model)
    saved = {name: b.detach().clone() for name, b in model.named_buffers()}

    def simulate(x: torch.Tensor) -> list:
        buffers = {name: b.clone() for name, b in saved.items()}   # BatchNorm's running statistics move per step
        theta = {name: p.clone().requires_grad_() for name, p in start.items()}
        velocity = {name: torch.zeros_like(p) for name, p in start.items()}
        rows = [w if w.requires_grad else w.detach().requires_grad_() for w in head]
        for k in range(steps):
            pick = slice(None) if batches is None else batches[k]
            loss = loss_fn(functional_call(model, (theta, buffers), (x[pick],)), labels[pick], *rows)
            grads = torch.autograd.grad(loss, [*theta.values(), *rows], create_graph=True)
            for (name, p), g in zip(list(theta.items()), grads):
                g = g + weight_decay * p if weight_decay else g
                g = g + correct(name, p, start[name]) if correct is not None else g
                velocity[name] = momentum * velocity[name] + g
                theta[name] = p - lr * velocity[name]
            rows = [w - lr * g for w, g in zip(rows, grads[len(theta):])]
        return [theta[name] - start[name] for name in start]
    return simulate


@dataclass
class Inversion:
    images: torch.Tensor        # [N, C, H, W], the restart with the lowest objective
    objective: float            # its final objective
    objectives: list            # every restart's final objective


def invert(simulate: Simulate, observed: Sequence[torch.Tensor], shape: Sequence[int], *, iterations: int = 2000,
           lr: float = 0.1, tv: float = 1e-4, restarts: int = 1, data_range: tuple = (0.0, 1.0),
           seed: int = 0, unknowns: Sequence[torch.Tensor] = ()) -> Inversion:
    """Minimise cosine_distance(simulate(x′), observed) + tv·TV(x′) over x′ of `shape` (see the module).
    `unknowns`: further tensors `simulate` reads (what the attacker does not know, e.g. a party's classifier),
    optimised beside x′ (unclamped) from their given values, which each restart starts from again."""
    low, high = data_range
    if not low < high:
        raise ValueError(f"data_range must be (low, high) with low < high, got {data_range}")
    observed = [o.detach() for o in observed]
    generator = torch.Generator().manual_seed(seed)
    best, objectives = None, []
    starts = [u.detach().clone() for u in unknowns]
    for _ in range(restarts):
        x = (low + (high - low) * torch.rand(tuple(shape), generator=generator, dtype=observed[0].dtype))
        x.requires_grad_()
        with torch.no_grad():
            for u, value in zip(unknowns, starts):
                u.copy_(value)
        variables = [x, *(u.requires_grad_() for u in unknowns)]
        optimiser = torch.optim.Adam(variables, lr=lr)
        milestones = [int(iterations * f) for f in (3 / 8, 5 / 8, 7 / 8)]
        schedule = torch.optim.lr_scheduler.MultiStepLR(optimiser, milestones=milestones, gamma=0.1)
        for _ in range(iterations):
            optimiser.zero_grad()
            loss = cosine_distance(simulate(x), observed) + tv * total_variation(x)
            for v, g in zip(variables, torch.autograd.grad(loss, variables)):
                v.grad = g.sign()
            optimiser.step()
            schedule.step()
            with torch.no_grad():
                x.clamp_(low, high)
        final = float((cosine_distance(simulate(x), observed) + tv * total_variation(x)).detach())
        objectives.append(final)
        if best is None or final < best.objective:
            best = Inversion(x.detach().clone(), final, objectives)
    best.objectives = objectives
    return best
