"""What the server does beside training: Federated Validation (FedFace Alg. 2) and held-out evaluation,
worked on while it waits for the parties' backbones, so that trainers never wait for either.

Every round the server posts the gather of θ_i asynchronously and works on its side work until the gather is
complete:
  - held-out evaluations of earlier Θ that are due (fedmpi.roles.evaluation);
  - FV iterations (Alg. 2): θ' is the latest gathered θ_i (line 2); T candidates ŵ_t from FVSearch.propose()
    (ŵ_1 = w); the candidate backbones Θ̂_t = ŵ_tᵀθ' (eq. 7) are posted to every validator; when all [T, V]
    scores are in, FVSearch.update normalises them, picks the best candidate and smooths w (eq. 8-13).
The w after the last FV iteration completed in round r is the weighting of round r's aggregation (eq. 4);
each completed iteration is logged to /fv with the round it completed in.

How many FV iterations a round gets:
  - deterministic mode (fv.iterations_per_round = n > 0): exactly n, started and completed within the round's
    wait whatever the timing (reproducible runs; trainers wait when n iterations take longer than K steps);
  - otherwise: as many as fit. Side work advances one small step at a time (a reply received from a dedicated
    validator, or one hosted set scored), and the server aggregates as soon as the gather is complete; an
    iteration in flight then carries on in the next round's wait with its own θ' (the paper's asynchronous
    search: θ' is fixed for a whole iteration). Trainers wait at most for one hosted set's scoring, and never
    for dedicated validators.
The first round has no θ' yet (every θ_i equals the initial Θ), so FV starts in the second round. An iteration
still in flight after the last round is drained (replies collected) and dropped: no aggregation would use it.
"""
from __future__ import annotations

import sys

import numpy as np
import torch
import torch.distributed as dist

from fedmpi import comm
from fedmpi.fv import FVSearch, candidate_backbone
from fedmpi.roles.context import Context
from fedmpi.roles.benchmarks import Benchmarks
from fedmpi.roles.evaluation import Evaluation
from fedmpi.roles.validator import SCORE, ValidatorPool, nap
from fedmpi.topology import SERVER


class FederatedValidation:
    """Alg. 2 on the server: the search state, the latest θ_i, and at most one iteration in flight."""

    def __init__(self, cfg, num_parties: int, pool: ValidatorPool, log, initial_w):
        v = cfg.fv
        self.search = FVSearch(num_parties, T=v.T, phi=v.phi, gamma=v.gamma, eps=v.eps, norm=v.norm,
                               seed=cfg.run.seed, initial_w=np.asarray(initial_w, dtype=np.float64))
        self.pool, self.log = pool, log
        self.latest: torch.Tensor | None = None      # [P, D], the θ_i of the last completed gather
        self.in_flight: tuple[np.ndarray, list] | None = None   # (candidates [T, P], one Request each)
        self.completed_in_round = 0

    @property
    def ready(self) -> bool:
        return self.latest is not None

    @property
    def w(self) -> np.ndarray:
        return self.search.w

    def snapshot(self, thetas: list[torch.Tensor]) -> None:
        """Keep the gathered θ_i: the gather's slots are written again next round."""
        if self.latest is None:
            self.latest = torch.stack(thetas)
        else:
            torch.stack(thetas, out=self.latest)

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
        record = self.search.update(candidates, raw)
        self.log.append("fv", round=r, iteration=self.completed_in_round, candidates=record["candidates"],
                        raw_scores=record["raw"], norm_scores=record["normalized"], chosen=record["chosen"],
                        w=record["w"])
        self.completed_in_round += 1
        return True

    def run_iteration(self, r: int) -> None:
        self.start()
        self.pool.wait(self.in_flight[1])
        self.complete_if_done(r)

    def drain(self) -> None:
        if self.in_flight is not None:
            self.pool.wait(self.in_flight[1])
            self.in_flight = None


class ServerValidation:
    """The server's side work, called from its round loop: `gather` replaces the plain gather of θ_i,
    `round_done` hands over the new Θ, `finish` evaluates the final Θ and stops the validators."""

    def __init__(self, ctx: Context, log, parties: list[str], initial_w: torch.Tensor, stream=sys.stdout):
        cfg = ctx.cfg
        self.ctx, self.parties, self.stream = ctx, parties, stream
        self.pool = ValidatorPool.build(ctx)
        self.evaluation = Evaluation(cfg, self.pool, log, stream, Benchmarks.build(cfg, ctx.device, ctx.dtype))
        self.fv = (FederatedValidation(cfg, len(parties), self.pool, log, initial_w.cpu().numpy())
                   if cfg.fv.enabled else None)

    def gather(self, r: int, theta: torch.Tensor, slots: list[torch.Tensor],
               w: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """θ_i of every party (party order) and the weighting for this round's aggregation."""
        work = dist.gather(theta, slots, dst=SERVER, group=self.ctx.groups.leaders, async_op=True)
        fv = self.fv
        if fv is not None:
            fv.completed_in_round = 0
        n = self.ctx.cfg.fv.iterations_per_round
        if n > 0:
            self.evaluation.run_pending()
            if fv is not None and fv.ready:
                for _ in range(n):
                    fv.run_iteration(r)
        else:
            while not work.is_completed() and self._has_work():
                if not self._step(r):
                    nap()
        with comm.naming_failures(f"gather of theta_i over {comm.group_label('leaders', self.ctx.groups.leaders)}"):
            work.wait()
        thetas = slots[1:]
        if fv is None:
            return thetas, w
        fv.snapshot(thetas)
        return thetas, torch.as_tensor(fv.w, dtype=w.dtype, device=w.device)

    def _has_work(self) -> bool:
        return self.evaluation.busy or (self.fv is not None and self.fv.ready)

    def _step(self, r: int) -> bool:
        """One small step of side work; False when it had to wait for validators."""
        moved = self.pool.progress()
        self.evaluation.step()
        if self.fv is not None:
            moved = self.fv.complete_if_done(r) or moved
            if self.fv.in_flight is None and self.fv.ready:
                self.fv.start()
                moved = True
        return moved

    def flush_evaluations(self) -> None:
        """Run every evaluation that is due now (before a checkpoint: a resumed run would not run it)."""
        self.evaluation.run_pending()

    def round_done(self, r: int, theta: torch.Tensor) -> None:
        """After round r's aggregation and broadcast: report FV, keep Θ for evaluation when one is due."""
        n = 0 if self.fv is None else self.fv.completed_in_round
        if n:
            weights = " ".join(f"{name} {value:.3f}" for name, value in zip(self.parties, self.fv.w))
            self.stream.write(f"  fv: {n} iteration{'s' if n > 1 else ''} this round, {self.fv.search.iteration} "
                              f"in all; w {weights}\n")
            self.stream.flush()
        self.evaluation.schedule(r, theta)

    def finish(self) -> None:
        """Evaluate what is still due (the final Θ), drain FV, stop the dedicated validators."""
        self.evaluation.run_pending()
        if self.fv is not None:
            self.fv.drain()
        self.pool.stop()

    def summary(self) -> str:
        """The table of held-out accuracy per set: the first evaluation next to the last."""
        return self.evaluation.summary()

    def state_dict(self) -> dict:
        """FV's search state (w, candidate RNG, Moving Norm statistics) for the server's checkpoint."""
        if self.fv is None:
            return {"fv": None}
        # the theta_i snapshot the next FV iteration searches over, so a resumed run continues bitwise
        latest = None if self.fv.latest is None else self.fv.latest.clone()
        return {"fv": self.fv.search.state_dict(), "latest": latest}

    def load_state_dict(self, state: dict) -> None:
        if self.fv is not None and state.get("fv") is not None:
            self.fv.search.load_state_dict(state["fv"])
            if state.get("latest") is not None:
                self.fv.latest = state["latest"].clone()
