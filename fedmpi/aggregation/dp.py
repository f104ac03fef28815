"""Central differential privacy for the silo setting (DP-FedAvg, McMahan et al. 2018): each party's update
Δ_i = θ_i − Θ is clipped to norm C at the server, the clipped updates are combined with the round's fixed weights
and Gaussian noise of standard deviation z·C·max_i w_i (the sensitivity of Σ_i w_i clip(Δ_i) to one party) is
added:  Θ + Σ_i w_i min(1, C/‖Δ_i‖) Δ_i + N(0, (z C max_i w_i)² I)   (uniform w: z·C on the sum, then / P).
Adaptive clipping (Andrew et al. 2021, Alg. 1): the noisy fraction of unclipped updates
b̃ = (Σ_i 1[‖Δ_i‖ ≤ C] + N(0, σ_b²)) / P moves C geometrically toward the γ-quantile, C ← C·exp(−η_C (b̃ − γ)),
and the update's noise multiplier becomes z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2) so that the round stays a Gaussian
mechanism of multiplier z (their Thm. 1). In the cross-device setting (user-level DP) each client's update is
clipped on the trainer rank that trains it (`clip_into`) and counts once, whatever its number of images; the
ranks' reduction gives the mean of the m sampled clients' clipped models and the server adds noise z·C/m
(`ClientGaussianMean`; m is fixed by clients.fraction, so this is McMahan et al.'s fixed-denominator
estimator). The noise comes from a generator seeded by fed.dp.seed whose state is
saved with the checkpoint: a resumed run adds the same noise as an uninterrupted one. The BatchNorm running
variances of the noised model are clamped at 0 (`nonnegative`): noise of z·C/P per coordinate makes some of them
negative, and a BatchNorm layer in eval mode divides by their square root (NaN embeddings); the clamp reads only
the mechanism's output, so it is post-processing and costs no privacy."""
from __future__ import annotations

import math

import torch

from fedmpi.aggregation.aggregators import Aggregator


def clip_into(out: torch.Tensor, upload: torch.Tensor, reference: torch.Tensor, clip: float) -> float:
    """out += reference + min(1, C/‖upload − reference‖) (upload − reference), in out's dtype; returns the norm."""
    delta = upload.to(out.dtype) - reference.to(out.dtype)
    norm = float(torch.linalg.vector_norm(delta, dtype=torch.float64))
    out.add_(reference.to(out.dtype)).add_(delta, alpha=min(1.0, clip / norm) if norm > 0 else 1.0)
    return norm


def update_noise_multiplier(z: float, count_noise: float) -> float:
    """z_Δ of adaptive clipping: what is left of z for the update once σ_b is spent on the clipped count."""
    return (z ** -2 - (2 * count_noise) ** -2) ** -0.5


class GaussianMean(Aggregator):
    """`reference`: the global payload Θ the round's uploads started from (read before `out` is written: they
    may be the same tensor); `options`: the fed.dp section; `count`: the uploads combined per round;
    `nonnegative`: slices of the payload clamped at 0 after the noise (BackboneState.variances)."""
    name, label = "dp_mean", "DP-FedAvg (Gaussian)"
    needs_uploads = True

    def __init__(self, options, reference: torch.Tensor, count: int, nonnegative: tuple[slice, ...] = ()):
        super().__init__(options)
        self.reference, self.count, self.nonnegative = reference, count, tuple(nonnegative)
        self.clip = float(options.clip)
        self.count_noise = options.count_noise or count / 20
        self.z = (update_noise_multiplier(options.noise_multiplier, self.count_noise) if options.adaptive
                  else options.noise_multiplier)
        self.generator = torch.Generator().manual_seed(options.seed)
        self.work: torch.Tensor | None = None     # the silo's [D_up] scratch, made on the first round
        self.last = {"clip": self.clip, "noise_std": 0.0, "unclipped": float("nan")}

    def __call__(self, uploads, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        if self.work is None:
            self.work = torch.empty_like(self.reference)
        rows, ref, work = uploads.rows, self.reference, self.work
        norms = torch.stack([torch.linalg.vector_norm(torch.sub(row, ref, out=work), dtype=torch.float64)
                             for row in rows])
        scale = torch.clamp(self.clip / norms, max=1.0)
        scale[norms == 0] = 1.0
        coef = w.to(device=rows.device, dtype=torch.float64) * scale    # w may come from the host (FV, fixed)
        torch.mv(rows.t(), coef.to(rows.dtype), out=work)
        work.add_(ref, alpha=float(1.0 - coef.sum()))
        self.add_noise(work, self.z * self.clip * float(w.max()))
        out.copy_(work)
        if self.options.adaptive:
            self.adapt(norms)
        return out

    def add_noise(self, out: torch.Tensor, std: float) -> None:
        """out += N(0, std² I) from the seeded generator (drawn on the CPU, so the same on any device); then the
        `nonnegative` slices clamped at 0."""
        out.add_(torch.randn(out.shape, generator=self.generator, dtype=out.dtype).to(out.device), alpha=std)
        for part in self.nonnegative:
            out[part].clamp_(min=0.0)
        self.last = {"clip": self.clip, "noise_std": std, "unclipped": float("nan")}

    def adapt(self, norms: torch.Tensor) -> None:
        o = self.options
        noise = float(torch.randn((), generator=self.generator, dtype=torch.float64))
        unclipped = (float((norms <= self.clip).sum()) + self.count_noise * noise) / len(norms)
        self.last["unclipped"] = unclipped
        self.clip *= math.exp(-o.clip_lr * (unclipped - o.target_quantile))

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state(), "clip": torch.tensor(self.clip, dtype=torch.float64)}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"].to(torch.uint8))
        self.clip = float(state["clip"])


class ClientGaussianMean(GaussianMean):
    """Cross-device: the uploads arrive clipped and summed by the trainer ranks (the exchange's mean over the m
    sampled clients, each counted once); the server adds N(0, (z C / m)²) to it."""
    name, label = "dp_client_mean", "DP-FedAvg (user level)"
    needs_uploads = False

    def __call__(self, uploads, w, out: torch.Tensor) -> torch.Tensor:
        uploads.weighted_mean(w, out)
        self.add_noise(out, self.z * self.clip / self.count)
        return out
