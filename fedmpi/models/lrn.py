"""Local response normalisation in one autograd function: torch's `LocalResponseNorm` to floating-point rounding,
in fewer passes over memory.

    b_c = a_c · d_c^(-β),   d_c = k + (α/n) Σ_{j ∈ W(c)} a_j²,   W(c) = [c - ⌊n/2⌋, c + ⌊(n-1)/2⌋]

torch computes d through a padded `avg_pool3d` and differentiates it op by op (pow, pool, div: about 40 % of a
step of McMahan's CIFAR CNN on one CPU thread). Here the window sum is one matrix product with a 0/1 band matrix
(the channels are the rows' last axis in NHWC, the matrices' middle one in NCHW: no copy in either layout), and
the backward pass is written out:

    ∂L/∂a_i = g_i d_i^(-β) - (2αβ/n) a_i Σ_{c: i ∈ W(c)} g_c b_c / d_c

whose sum runs over the transposed window (the band's transpose). A second derivative (create_graph, the audit's
gradient matching) is taken through torch's own composite form, which carries it.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn


@functools.lru_cache(maxsize=32)
def _band(channels: int, size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """band[j, c] = 1 where channel j lies in channel c's window W(c) = [c - ⌊n/2⌋, c + ⌊(n-1)/2⌋], n = size."""
    j = torch.arange(channels).unsqueeze(1)
    c = torch.arange(channels).unsqueeze(0)
    return ((j >= c - size // 2) & (j <= c + (size - 1) // 2)).to(dtype=dtype, device=device)


def _window_sum(t: torch.Tensor, band: torch.Tensor) -> torch.Tensor:
    """Σ_j t_j band[j, c] for every channel c of a 4-D (N, C, H, W) tensor, in t's memory layout."""
    n, c, h, w = t.shape
    if t.stride(1) == 1 < t.stride(3):    # NHWC (strides: vmap answers no memory-format query)
        return (t.permute(0, 2, 3, 1).reshape(-1, c) @ band).view(n, h, w, c).permute(0, 3, 1, 2)
    return torch.matmul(band.t(), t.reshape(n, c, h * w)).view(n, c, h, w)


def _negative_power(d: torch.Tensor, beta: float) -> torch.Tensor:
    """d^(-β); β = 3/4 (the CIFAR CNN's) as rsqrt(d)·sqrt(rsqrt(d)): a third of pow's time on CPU, within 2 ulp."""
    if beta == 0.75:
        r = torch.rsqrt(d)
        return r.mul_(r.sqrt())
    return d.pow(-beta)


class _LocalResponseNorm(torch.autograd.Function):
    generate_vmap_rule = True     # a vectorised cohort's vmap (crossdevice/cohort.py) batches these ops as they are

    @staticmethod
    def forward(a: torch.Tensor, size: int, alpha: float, beta: float, k: float):
        d = _window_sum(a * a, _band(a.shape[1], size, a.dtype, a.device))
        d = d.mul_(alpha / size).add_(k)
        r = _negative_power(d, beta)
        return a * r, r, d

    @staticmethod
    def setup_context(ctx, inputs, output):
        a, size, alpha, beta, k = inputs
        _, r, d = output
        ctx.mark_non_differentiable(r, d)
        ctx.save_for_backward(a, r, d)
        ctx.options = (size, alpha, beta, k)

    @staticmethod
    def backward(ctx, g: torch.Tensor, *unused):
        a, r, d = ctx.saved_tensors
        size, alpha, beta, k = ctx.options
        if torch.is_grad_enabled():   # create_graph: r and d are not on the graph, torch's form is
            b = F.local_response_norm(a, size, alpha, beta, k)
            return torch.autograd.grad(b, a, g, create_graph=True)[0], None, None, None, None
        g_r = g * r
        t = _window_sum((g_r * a).div_(d), _band(a.shape[1], size, a.dtype, a.device).t())
        return g_r.sub_(t.mul_(a).mul_(2 * alpha * beta / size)), None, None, None, None


class FusedLocalResponseNorm(nn.LocalResponseNorm):
    """nn.LocalResponseNorm (the same options, no state) computed by `_LocalResponseNorm` on 4-D input."""

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        if a.dim() != 4:
            return super().forward(a)
        return _LocalResponseNorm.apply(a, self.size, self.alpha, self.beta, self.k)[0]


def fuse_local_response_norms(module: nn.Module) -> int:
    """Every nn.LocalResponseNorm of `module` computed as FusedLocalResponseNorm, its class swapped in place (the
    state_dict is unchanged: the layer has none); returns how many."""
    count = 0
    for m in module.modules():
        if type(m) is nn.LocalResponseNorm:
            m.__class__ = FusedLocalResponseNorm
            count += 1
    return count
