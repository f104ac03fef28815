"""Federated Validation (FedFace Alg. 2, eq. 7-13): the server's search over aggregation weightings.

Pure numpy/torch: no MPI here. The server drives `FVSearch`: propose() -> T candidate weightings (row 0 is the
current w), each candidate backbone Θ̂ = ŵᵀθ' is scored by every validator, update() normalises the [T, V] score
matrix per validator, picks the best candidate and smooths w towards it.

Choices the paper leaves open:
- variances are population variances (divide by the number of scores), in eq. 8 and eq. 10;
- Moving Norm starts from the first iteration's own statistics: μ = mean(S_i), ν = mean((S_i - μ)²)
  (eq. 9-10 with γ = 1 on the first call), then follows eq. 9-10; eq. 10 uses the μ just updated by eq. 9;
- ties in the argmax go to the lowest index, i.e. to the current w; choosing it leaves w bit-for-bit unchanged;
- a candidate with a score that is not finite (its backbone's embeddings are not: an upload out of range in θ')
  is ranked last: its normalised scores are -inf, and the others are normalised among themselves (Moving Norm's
  statistics follow them only). When no candidate is finite there is nothing to rank (`NoFiniteCandidate`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

SIMPLEX_TOLERANCE = 1e-6
NORMS = ("local", "moving")


def check_simplex(w, what: str = "w") -> np.ndarray:
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 1 or len(w) == 0:
        raise ValueError(f"{what} must be a non-empty 1-D weighting, got shape {w.shape}")
    if not np.isfinite(w).all() or (w < 0).any() or abs(w.sum() - 1.0) > SIMPLEX_TOLERANCE:
        raise ValueError(f"{what} must be non-negative and sum to 1, got {w.tolist()}")
    return w


def sample_candidates(w, T: int, rng: np.random.Generator) -> np.ndarray:
    """[T, P]: row 0 is the current w, rows 1.. are uniform on the simplex (Dirichlet(1, ..., 1))."""
    w = check_simplex(w)
    if T < 1:
        raise ValueError(f"T (candidates per FV iteration) must be at least 1, got {T}")
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    return np.vstack([w[None, :], rng.dirichlet(np.ones(len(w)), size=T - 1)])


def candidate_backbone(w_hat, thetas):
    """Θ̂ = ŵᵀθ' (eq. 7): thetas is a stacked [P, D] tensor/array or a list of P flat tensors."""
    w_hat = np.asarray(w_hat, dtype=np.float64)
    if w_hat.ndim != 1 or len(w_hat) != len(thetas):
        raise ValueError(f"weighting has {w_hat.size} entries for {len(thetas)} party backbones")
    if isinstance(thetas, np.ndarray):
        if thetas.ndim != 2:
            raise ValueError(f"stacked backbones must be [P, D], got shape {thetas.shape}")
        return (w_hat.astype(thetas.dtype) @ thetas)
    if isinstance(thetas, torch.Tensor):
        if thetas.ndim != 2:
            raise ValueError(f"stacked backbones must be [P, D], got shape {tuple(thetas.shape)}")
        return torch.as_tensor(w_hat, dtype=thetas.dtype, device=thetas.device) @ thetas
    shapes = {tuple(t.shape) for t in thetas}
    if len(shapes) != 1 or len(next(iter(shapes))) != 1:
        raise ValueError(f"party backbones must be flat tensors of one size, got shapes {sorted(shapes)}")
    out = thetas[0] * float(w_hat[0])
    for weight, theta in zip(w_hat[1:], thetas[1:]):
        out.add_(theta, alpha=float(weight))
    return out


def _check_scores(S) -> np.ndarray:
    S = np.asarray(S, dtype=np.float64)
    if S.ndim != 2 or S.size == 0:
        raise ValueError(f"scores must be a [T candidates, V validators] matrix, got shape {S.shape}")
    if not np.isfinite(S).all():
        raise ValueError("scores contain NaN or infinite values")
    return S


class NoFiniteCandidate(ValueError):
    """Every candidate of an FV iteration has a score that is not finite."""


def local_norm(S, eps: float = 1e-3) -> np.ndarray:
    """Eq. 8: each validator's column divided by sqrt(population variance over the T candidates + eps)."""
    S = _check_scores(S)
    return S / np.sqrt(S.var(axis=0) + eps)


class MovingNorm:
    """Eq. 9-11: each validator's column divided by sqrt(ν + eps), ν a moving variance around a moving mean μ."""

    def __init__(self, gamma: float = 0.01, eps: float = 1e-3):
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {gamma}")
        self.gamma, self.eps = float(gamma), float(eps)
        self.mu: np.ndarray | None = None
        self.nu: np.ndarray | None = None

    def __call__(self, S) -> np.ndarray:
        S = _check_scores(S)
        if self.mu is None:
            self.mu = S.mean(axis=0)
            self.nu = ((S - self.mu) ** 2).mean(axis=0)
        else:
            if S.shape[1] != len(self.mu):
                raise ValueError(f"scores have {S.shape[1]} validators but Moving Norm tracks {len(self.mu)}")
            self.mu = (1 - self.gamma) * self.mu + self.gamma * S.mean(axis=0)  # eq. 9
            self.nu = (1 - self.gamma) * self.nu + self.gamma * ((S - self.mu) ** 2).mean(axis=0)  # eq. 10
        return S / np.sqrt(self.nu + self.eps)  # eq. 11

    def state_dict(self) -> dict:
        return {"gamma": self.gamma, "eps": self.eps,
                "mu": None if self.mu is None else self.mu.tolist(),
                "nu": None if self.nu is None else self.nu.tolist()}

    def load_state_dict(self, state: dict) -> None:
        self.gamma, self.eps = float(state["gamma"]), float(state["eps"])
        self.mu = None if state["mu"] is None else np.array(state["mu"], dtype=np.float64)
        self.nu = None if state["nu"] is None else np.array(state["nu"], dtype=np.float64)


def choose(S_norm) -> int:
    """Eq. 12: index of the candidate with the largest summed normalised score (ties -> lowest index); a candidate
    ranked last (-inf) is chosen only when every one is."""
    S = np.asarray(S_norm, dtype=np.float64)
    _check_scores(np.where(np.isneginf(S), 0.0, S))
    return int(np.argmax(S.sum(axis=1)))


def smooth(w, w_hat, phi: float) -> np.ndarray:
    """Eq. 13: w <- (1 - φ) w + φ ŵ."""
    if not 0.0 <= phi <= 1.0:
        raise ValueError(f"phi (smoothing rate) must be in [0, 1], got {phi}")
    w, w_hat = check_simplex(w), check_simplex(w_hat, "w_hat")
    if w.shape != w_hat.shape:
        raise ValueError(f"w has {len(w)} parties but w_hat has {len(w_hat)}")
    return (1.0 - phi) * w + phi * w_hat


class FVSearch:
    """State of the server's FV search: w, the candidate RNG and the normaliser."""

    def __init__(self, num_parties: int, T: int = 3, phi: float = 0.01, gamma: float = 0.01, eps: float = 1e-3,
                 norm: str = "local", seed: int = 0, initial_w: Sequence[float] | None = None):
        if num_parties < 1:
            raise ValueError(f"num_parties must be at least 1, got {num_parties}")
        if T < 1:
            raise ValueError(f"T (candidates per FV iteration) must be at least 1, got {T}")
        if not 0.0 <= phi <= 1.0:
            raise ValueError(f"phi (smoothing rate) must be in [0, 1], got {phi}")
        if norm not in NORMS:
            raise ValueError(f"FV norm must be one of {NORMS}, got {norm!r}")
        w = np.full(num_parties, 1.0 / num_parties) if initial_w is None else check_simplex(initial_w, "initial_w")
        if len(w) != num_parties:
            raise ValueError(f"initial_w has {len(w)} entries for {num_parties} parties")
        self.num_parties, self.T, self.phi, self.eps, self.norm = num_parties, T, float(phi), float(eps), norm
        self.w = w.copy()
        self.rng = np.random.default_rng(seed)
        self.moving = MovingNorm(gamma, eps) if norm == "moving" else None
        self.iteration = 0

    def normalize(self, S) -> np.ndarray:
        """The [T, V] scores normalised (eq. 8 or eq. 9-11); a candidate with a score that is not finite gets -inf
        in every column, the others are normalised among themselves."""
        S = np.asarray(S, dtype=np.float64)
        finite = np.isfinite(S).all(axis=1)
        if not finite.any():
            raise NoFiniteCandidate(f"every one of the {len(S)} FV candidates has a score that is not finite")
        out = np.full(S.shape, -np.inf)
        out[finite] = self.moving(S[finite]) if self.moving is not None else local_norm(S[finite], self.eps)
        return out

    def propose(self) -> np.ndarray:
        """T candidate weightings [T, P]; row 0 is the current w."""
        return sample_candidates(self.w, self.T, self.rng)

    def update(self, candidates, raw_scores) -> dict:
        """Normalise the [T, V] scores of `candidates`, pick the best (eq. 12) and smooth w towards it (eq. 13)."""
        candidates = np.asarray(candidates, dtype=np.float64)
        if candidates.shape != (self.T, self.num_parties):
            raise ValueError(f"candidates must be [{self.T}, {self.num_parties}], got {candidates.shape}")
        if not np.array_equal(candidates[0], self.w):
            raise ValueError("candidate 0 is not the current w: candidates must come from propose() since the "
                             "last update")
        raw = np.asarray(raw_scores, dtype=np.float64)
        if raw.ndim != 2 or raw.size == 0:
            raise ValueError(f"scores must be a [T candidates, V validators] matrix, got shape {raw.shape}")
        if raw.shape[0] != self.T:
            raise ValueError(f"scores have {raw.shape[0]} rows for {self.T} candidates")
        normalized = self.normalize(raw)
        chosen = choose(normalized)
        if chosen != 0:
            self.w = smooth(self.w, candidates[chosen], self.phi)
        self.iteration += 1
        return {"candidates": candidates, "raw": raw, "normalized": normalized, "chosen": chosen,
                "w": self.w.copy()}

    def state_dict(self) -> dict:
        return {"num_parties": self.num_parties, "T": self.T, "phi": self.phi, "eps": self.eps, "norm": self.norm,
                "w": self.w.tolist(), "iteration": self.iteration, "rng": self.rng.bit_generator.state,
                "moving": None if self.moving is None else self.moving.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if state["num_parties"] != self.num_parties or state["norm"] != self.norm:
            raise ValueError(f"FV state is for {state['num_parties']} parties with {state['norm']!r} norm, this "
                             f"search has {self.num_parties} parties with {self.norm!r} norm")
        self.T, self.phi, self.eps = int(state["T"]), float(state["phi"]), float(state["eps"])
        self.w = check_simplex(state["w"], "w in the FV state").copy()
        self.iteration = int(state["iteration"])
        self.rng.bit_generator.state = state["rng"]
        if self.moving is not None:
            self.moving.load_state_dict(state["moving"])
