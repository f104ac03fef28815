"""Central differential privacy (DP-FedAvg, McMahan et al. 2018) as a wrapper around the server's aggregator, as
Flower's DifferentialPrivacyServerSideFixedClipping wraps a strategy: each party's update Δ_i = θ_i − Θ is
clipped to norm C at the server (the rows become Θ + min(1, C/‖Δ_i‖) Δ_i), the inner aggregator combines the
clipped rows with the round's fixed weights, and Gaussian noise of standard deviation z·C·max_i w_i (the
sensitivity of Σ_i w_i clip(Δ_i) to one party) is added:
Θ + Σ_i w_i min(1, C/‖Δ_i‖) Δ_i + N(0, (z C max_i w_i)² I)   (uniform w: z·C on the sum, then / P).
The inner aggregator must have the weighted mean's sensitivity: the config refuses any other
(config/aggregation.py, `refusal`).
Adaptive clipping (Andrew et al. 2021, Alg. 1): the noisy fraction of unclipped updates
b̃ = (Σ_i 1[‖Δ_i‖ ≤ C] + N(0, σ_b²)) / P moves C geometrically toward the γ-quantile, C ← C·exp(−η_C (b̃ − γ)),
and the update's noise multiplier becomes z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2) so that the round stays a Gaussian
mechanism of multiplier z (their Thm. 1). In the cross-device setting (user-level DP) each client's update is
clipped on the trainer rank that trains it (`clip_into`) and counts once, whatever its number of images; the
ranks' reduction gives the mean of the m sampled clients' clipped models and the server adds noise z·C/m
(`clip_at_server=False`, the round has no w; m is fixed by clients.fraction, so this is McMahan et al.'s
fixed-denominator estimator). The noise comes from a generator seeded by fed.dp.seed whose state is
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


class GaussianMechanism(Aggregator):
    """DP-FedAvg around `inner` (the rule's combination). `options`: the fed.dp section; `count`: the uploads
    combined per round; `nonnegative`: slices of the payload clamped at 0 after the noise
    (BackboneState.variances); `clip_at_server`: clip each row here (silo), or take a combination of updates the
    trainer ranks clipped (cross-device). Θ, the reference the updates are measured from, comes from the server
    step (`starts_from`); the rows are clipped in place before the inner aggregator reads them (and before it
    writes `out`, which may be Θ itself)."""
    name, label = "dp", "DP-FedAvg (Gaussian)"

    def __init__(self, inner: Aggregator, options, count: int, nonnegative: tuple[slice, ...] = (),
                 clip_at_server: bool = True, noised_by_participants: bool = False):
        """noised_by_participants: distributed DP under secure aggregation (fedmpi/core/secure_uploads.py, dp_share):
        every participant clipped its update and added its share of the noise before masking, so the combination
        carries the noise already; here only the clamp, and the report of the noise the exchange decoded
        (`uploads.noise_std`: it depends on how many shares survived)."""
        super().__init__(options)
        self.inner, self.count, self.nonnegative = inner, count, tuple(nonnegative)
        self.clip_at_server, self.noised_by_participants = clip_at_server, noised_by_participants
        self.needs_uploads = clip_at_server or inner.needs_uploads
        self.clips_uploads = clip_at_server
        self.clip = float(options.clip)
        self.count_noise = options.count_noise or count / 20
        self.z = (update_noise_multiplier(options.noise_multiplier, self.count_noise) if options.adaptive
                  else options.noise_multiplier)
        self.generator = torch.Generator().manual_seed(options.seed)
        self.reference: torch.Tensor | None = None
        self.work: torch.Tensor | None = None     # one row's update, made on the first round
        self.last = {"clip": self.clip, "noise_std": 0.0, "unclipped": float("nan")}

    def starts_from(self, reference: torch.Tensor) -> None:
        self.reference = reference

    def __call__(self, uploads, w, out: torch.Tensor) -> torch.Tensor:
        norms = self.clip_rows(uploads.rows) if self.clip_at_server else None
        self.inner(uploads, w, out)
        if self.noised_by_participants:         # the participants added it: the exchange knows how much survived
            self.add_noise(out, uploads.noise_std, here=0.0)
        else:
            # the sensitivity of the combination to one upload: C max_i w_i, or C / m for m clients counted once
            share = float(w.max()) if w is not None else 1.0 / self.count
            self.add_noise(out, self.z * self.clip * share)
        if self.options.adaptive:
            self.adapt(norms)
        return out

    def clip_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """Each row θ_i ← Θ + min(1, C/‖θ_i − Θ‖) (θ_i − Θ), in place (a row within C is left as it is, and no
        norm is read on the host); the norms ‖θ_i − Θ‖ (float64)."""
        ref = self.reference
        if self.work is None:
            self.work = torch.empty_like(ref)
        norms = torch.stack([torch.linalg.vector_norm(torch.sub(row, ref, out=self.work), dtype=torch.float64)
                             for row in rows])
        keep = torch.clamp(self.clip / norms, max=1.0)          # C / 0 = inf: an unchanged row is kept whole
        for row, share in zip(rows, (1.0 - keep).to(rows.dtype)):
            row.lerp_(ref, share)                               # θ_i + (1 − s_i)(Θ − θ_i)
        return norms

    def add_noise(self, out: torch.Tensor, std: float, here: float = 1.0) -> None:
        """out += N(0, std² I) from the seeded generator (drawn on the CPU, so the same on any device; `here` 0:
        the participants added it); then the `nonnegative` slices clamped at 0."""
        if here:
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
