"""Federated Validation on the server (FedFace Alg. 2): the search state, the latest θ_i, and at most one
iteration in flight. The round loop (core/server.py) uses it twice: as the round's weighting (`for_round`:
keep the gathered θ_i as θ', hand out w) and, through silo/side_work.py, as side work done while the next
round's uploads travel:
  - θ' is the latest gathered θ_i (line 2), read in place from the exchange's rows (no copy);
  - T candidates ŵ_t from FVSearch.propose() (ŵ_1 = w); the candidate backbones Θ̂_t = ŵ_tᵀθ' (eq. 7) are
    posted to every validator; when all [T, V] scores are in, FVSearch.update normalises them, picks the best
    candidate and smooths w (eq. 8-13).
The w after the last FV iteration completed in round r is the weighting of round r's aggregation (eq. 4);
each completed iteration is logged to /fv with the round it completed in. A candidate whose backbone scores are
not finite is ranked last (fv/search.py; logged with its NaN scores and normalised scores of -inf); when none is
finite the global model is no longer finite either, and the run stops (`Diverged`).
"""
from __future__ import annotations

import numpy as np
import torch

from fedmpi.errors import Diverged
from fedmpi.fv.search import FVSearch, NoFiniteCandidate, candidate_backbone
from fedmpi.fv.validator_client import SCORE, ValidatorPool


class FederatedValidation:
    """Alg. 2 on the server: the search state, the latest θ_i, and at most one iteration in flight."""

    def __init__(self, cfg, num_parties: int, pool: ValidatorPool, log, initial_w, device=torch.device("cpu")):
        v = cfg.fv
        self.search = FVSearch(num_parties, T=v.T, phi=v.phi, gamma=v.gamma, eps=v.eps, norm=v.norm,
                               seed=cfg.run.seed, initial_w=np.asarray(initial_w, dtype=np.float64))
        self.pool, self.log, self.device = pool, log, torch.device(device)
        self.latest: torch.Tensor | None = None      # [P, D], the θ_i of the last completed gather
        self.in_flight: tuple[np.ndarray, list] | None = None   # (candidates [T, P], one Request each)
        self.completed_in_round = 0
        self.not_finite_in_round = 0                # candidates ranked last for scores that are not finite

    @property
    def ready(self) -> bool:
        return self.latest is not None

    @property
    def w(self) -> np.ndarray:
        return self.search.w

    def for_round(self, r: int, rows: torch.Tensor | None) -> torch.Tensor:
        """The round's weighting, after keeping θ' = the gathered θ_i ([P, D] rows, read in place: the exchange
        does not write them again while an iteration may read them)."""
        self.latest = rows
        return torch.as_tensor(self.search.w, dtype=torch.float64)

    def start(self) -> None:
        """θ' ← θ (line 2); post the T candidate backbones Θ̂ = ŵᵀθ' (eq. 7) to every validator."""
        candidates = self.search.propose()
        requests = [self.pool.post(SCORE, candidate_backbone(w_hat, self.latest)) for w_hat in candidates]
        self.in_flight = (candidates, requests)

    def complete_if_done(self, r: int) -> bool:
        """When every score of the iteration in flight is in: update w (eq. 8-13) and log it."""
        if self.in_flight is None or not all(q.done for q in self.in_flight[1]):
            return False
        candidates, requests = self.in_flight
        self.in_flight = None
        raw = np.array([[q.result()[name] for name in self.pool.val_sets] for q in requests])
        try:
            record = self.search.update(candidates, raw)
        except NoFiniteCandidate as exc:
            raise Diverged(f"the global model is no longer finite: {exc} (FV iteration "
                           f"{self.search.iteration + 1})") from None
        self.not_finite_in_round += int((~np.isfinite(raw).all(axis=1)).sum())
        self.log.append("fv", round=r, iteration=self.completed_in_round, candidates=record["candidates"],
                        raw_scores=record["raw"], norm_scores=record["normalized"], chosen=record["chosen"],
                        w=record["w"])
        self.completed_in_round += 1
        return True

    def run_iteration(self, r: int) -> None:
        self.start()
        self.pool.wait(self.in_flight[1])
        self.complete_if_done(r)

    def state_dict(self) -> dict:
        """The search state and the θ' snapshot the next iteration searches over (a resumed run continues
        bitwise)."""
        return {"fv": self.search.state_dict(), "latest": None if self.latest is None else self.latest.clone()}

    def load_state_dict(self, state: dict) -> None:
        """θ' comes back from the checkpoint in host memory: it goes to the device the gathered rows live on,
        so that the candidates are formed (eq. 7) and sent from there, as in an uninterrupted run."""
        self.search.load_state_dict(state["fv"])
        if state.get("latest") is not None:
            self.latest = state["latest"].to(self.device, copy=True)

    def drain(self) -> None:
        if self.in_flight is not None:
            self.pool.wait(self.in_flight[1])
            self.in_flight = None
