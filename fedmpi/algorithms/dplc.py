"""PrivacyFace-style differentially private local clustering (DPLC) of a party's class embeddings, the
reference design of spec §3.3 (a reconstruction, [R]: the paper's algorithm could not be read; docs/BASELINES.md).

One identity is one privacy unit (neighbouring: one class embedding replaced). For q = 1..Q, on the unit rows:
  1. M candidate directions a_m, uniform on the sphere (data-independent, from the seeded generator);
  2. counts n_m = |{c : ŵ_c·a_m ≥ κ}| (sensitivity 1);
  3. m* by the exponential mechanism, P(m) ∝ exp(ε₁ n_m / 2) (ε₁-DP), or report-noisy-max with Laplace(2/ε₁);
  4. ñ = n_m* + Laplace(1/ε₂) (ε₂-DP); below n_min nothing is released;
  5. S = Σ_{ŵ_c·a ≥ κ} (ŵ_c − a): each term has norm ≤ r = √(2 − 2κ), so one identity moves S by at most 2r;
     S̃ = S + N(0, σ² I), σ = 2r √(2 ln(1.25/δ)) / ε₃ (the classical Gaussian mechanism, which needs ε₃ < 1);
  6. the cluster: centre p = normalize(a + S̃ / max(ñ, 1)), angular radius α = arccos κ (a public parameter);
  7. the cone's members are removed before the next q (the clusters stay disjoint).
A release of Q clusters is (Q(ε₁ + ε₂ + ε₃), Qδ)-DP by basic composition, counted whether or not step 4
released the cluster; R releases compose to (RQ(ε₁ + ε₂ + ε₃), RQδ).

A released cluster travels as one row [p (d) | α | 1]; a row whose last value is 0 holds no cluster."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

EXPONENTIAL, NOISY_MAX = "exponential", "noisy_max"


@dataclass(frozen=True)
class Budget:
    """One release's mechanisms: ε₁ (selection), ε₂ (count), ε₃ (sum) and δ, for Q clusters."""
    clusters: int
    epsilon_select: float
    epsilon_count: float
    epsilon_sum: float
    delta: float

    @property
    def epsilon(self) -> float:
        """ε of one release (Q clusters, basic composition)."""
        return self.clusters * (self.epsilon_select + self.epsilon_count + self.epsilon_sum)

    @property
    def release_delta(self) -> float:
        return self.clusters * self.delta

    def spent(self, releases: int) -> tuple[float, float]:
        """(ε, δ) after `releases` releases (basic composition)."""
        return releases * self.epsilon, releases * self.release_delta


def chord_radius(kappa: float) -> float:
    """r = √(2 − 2κ): the largest ‖ŵ − a‖ of a unit row with ŵ·a ≥ κ."""
    return math.sqrt(2.0 - 2.0 * kappa)


def gaussian_sigma(kappa: float, epsilon: float, delta: float) -> float:
    """σ of the Gaussian mechanism on S: sensitivity Δ = 2r, σ = Δ √(2 ln(1.25/δ)) / ε (ε < 1)."""
    if not 0 < epsilon < 1:
        raise ValueError(f"the classical Gaussian mechanism needs 0 < epsilon < 1, got {epsilon}")
    return 2 * chord_radius(kappa) * math.sqrt(2 * math.log(1.25 / delta)) / epsilon


def exponential_pick(counts: torch.Tensor, epsilon: float, uniform: float) -> int:
    """The exponential mechanism's choice, P(m) ∝ exp(ε n_m / 2), by the inverse CDF at `uniform` ∈ [0, 1)."""
    logits = counts.to(torch.float64) * (epsilon / 2)
    weights = torch.exp(logits - logits.max())
    cdf = torch.cumsum(weights, 0)
    return min(int(torch.searchsorted(cdf, uniform * float(cdf[-1]), right=True)), counts.numel() - 1)


def release(unit: torch.Tensor, anchor: torch.Tensor, kappa: float, noisy_count: float,
            noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps 5-6 with the count and the Gaussian draw given: (p, the members' mask)."""
    members = (unit @ anchor) >= kappa
    offsets = (unit[members] - anchor).sum(dim=0)
    centre = anchor + (offsets + noise) / max(noisy_count, 1.0)
    return centre / torch.linalg.vector_norm(centre), members


def generator(seed: int, party: int, release_index: int) -> np.random.Generator:
    """The draws of one party's release: from (seed, party, release), so a resumed run draws the same."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, party, release_index])))


def cluster(unit: torch.Tensor, out: torch.Tensor, *, kappa: float, budget: Budget, candidates: int,
            min_count: float, selection: str, rng: np.random.Generator) -> int:
    """Q clusters of the unit rows [n, d] into out [Q, d + 2] (float64 arithmetic); returns how many were released."""
    d = unit.shape[1]
    rows = unit.to(torch.float64)
    sigma = gaussian_sigma(kappa, budget.epsilon_sum, budget.delta)
    out.zero_()
    released = 0
    for q in range(budget.clusters):
        directions = torch.from_numpy(rng.standard_normal((candidates, d)))
        directions /= torch.linalg.vector_norm(directions, dim=1, keepdim=True)
        counts = ((rows @ directions.T) >= kappa).sum(dim=0)
        if selection == EXPONENTIAL:
            chosen = exponential_pick(counts, budget.epsilon_select, float(rng.random()))
        else:
            chosen = int(torch.argmax(counts + torch.from_numpy(rng.laplace(0, 2 / budget.epsilon_select, candidates))))
        noisy = float(counts[chosen]) + float(rng.laplace(0, 1 / budget.epsilon_count))
        noise = torch.from_numpy(rng.normal(0.0, sigma, d))
        centre, members = release(rows, directions[chosen], kappa, noisy, noise)
        if noisy >= min_count:
            out[q, :d] = centre.to(out.dtype)
            out[q, d] = math.acos(kappa)
            out[q, d + 1] = 1.0
            released += 1
        rows = rows[~members]
    return released
