"""What the server does beside training, called from its round loop while a round's uploads travel:
held-out evaluations that are due (silo/evaluation.py, with the large-scale benchmarks of eval.sets,
evaluation/benchmarks.py) and FV iterations (fv/weighting.py).
The validators (and a hosted Validator with its validation sets) exist only when one of the two is on.

How many FV iterations a round gets:
  - deterministic mode (fv.iterations_per_round = n > 0): exactly n, started and completed within the round's
    wait whatever the timing (reproducible runs; trainers wait when n iterations take longer than K steps);
    a due evaluation then advances a set at a time until the uploads are in (its figures do not depend on when);
  - otherwise: as many as fit. Side work advances one small step at a time (a reply received from a dedicated
    validator, or one hosted set scored), and the server aggregates as soon as the uploads are in; an
    iteration in flight then carries on in the next round's wait with its own θ' (the paper's asynchronous
    search: θ' is fixed for a whole iteration). Trainers wait at most for one hosted set's scoring, and never
    for dedicated validators.
The first round has no θ' yet (every θ_i equals the initial Θ), so FV starts in the second round. An iteration
still in flight after the last round is drained (replies collected) and dropped: no aggregation would use it.
"""
from __future__ import annotations

import sys
from typing import Callable

import torch

from fedmpi.comm.control import Backoff
from fedmpi.config import fv_runs
from fedmpi.evaluation.benchmarks import Benchmarks
from fedmpi.fv.weighting import FederatedValidation
from fedmpi.fv.validator_client import ValidatorPool
from fedmpi.silo.evaluation import Evaluation


class FixedWeighting:
    """The weighting when FV is off: the initial w, every round."""

    def __init__(self, w: torch.Tensor):
        self.w = w

    def for_round(self, r: int, rows) -> torch.Tensor:
        return self.w


class SideWork:
    """`pool`: the validators (None when neither FV nor held-out evaluation runs); `benchmarks`: eval.sets'
    (None without); `device`: where FV forms its candidate backbones."""

    def __init__(self, cfg, log, parties: list[str], initial_w: torch.Tensor, pool: ValidatorPool | None,
                 benchmarks: Benchmarks | None, device, stream=sys.stdout):
        self.cfg, self.parties, self.stream = cfg, parties, stream
        self.pool = pool
        self.evaluation = Evaluation(cfg, pool, log, stream, benchmarks) if cfg.eval.every > 0 else None
        self.fv = (FederatedValidation(cfg, len(parties), pool, log, initial_w.cpu().numpy(), device)
                   if fv_runs(cfg) else None)
        self.weighting = self.fv or FixedWeighting(initial_w)

    def work_until(self, complete: Callable[[], bool], r: int) -> None:
        """Evaluations and FV iterations while the round's uploads travel (see the module's text)."""
        if self.fv is not None:
            self.fv.completed_in_round = self.fv.not_finite_in_round = 0
        n = self.cfg.fv.iterations_per_round
        if n > 0:
            if self.fv is not None and self.fv.ready:
                for _ in range(n):
                    self.fv.run_iteration(r)
            # then a due evaluation, one set at a time while the uploads travel: what is left carries on in the
            # next rounds (Θ was kept when it was scheduled), so the trainers wait for one set at most
            backoff = Backoff()
            while not complete() and self.evaluation is not None and self.evaluation.busy:
                self.evaluation.step()
                backoff.after(self.pool.progress())
            return
        # naps that back off while nothing moves: a few dozen wake-ups a second rather than a flat 2 ms's 500,
        # at most MAX_NAP_S late for the uploads
        backoff = Backoff()
        while not complete() and self._has_work():
            backoff.after(self._step(r))

    @property
    def uploads_kept(self) -> int:
        """How many earlier rounds' uploads the side work still reads while the next round's land: FV searches
        over the previous round's θ_i (in place, no copy) while the next gather fills another buffer."""
        return 0 if self.fv is None else 1

    def _has_work(self) -> bool:
        return (self.evaluation is not None and self.evaluation.busy) or (self.fv is not None and self.fv.ready)

    def _step(self, r: int) -> bool:
        """One small step of side work; False when it had to wait for validators."""
        moved = self.pool.progress()
        if self.evaluation is not None:
            self.evaluation.step()
        if self.fv is not None:
            moved = self.fv.complete_if_done(r) or moved
            if self.fv.in_flight is None and self.fv.ready:
                self.fv.start()
                moved = True
        return moved

    @property
    def fv_iterations(self) -> int:
        """FV iterations completed in the current round."""
        return 0 if self.fv is None else self.fv.completed_in_round

    def round_columns(self) -> dict:
        """The side work's columns of the round's /rounds row."""
        return {"fv_iterations": self.fv_iterations}

    def progress_note(self) -> str:
        return "" if self.fv is None else f"fv {self.fv_iterations} it"

    def flush_evaluations(self) -> None:
        """Run every evaluation that is due now (before a checkpoint: a resumed run would not run it)."""
        if self.evaluation is not None:
            self.evaluation.run_pending()

    def round_done(self, r: int, theta: torch.Tensor) -> None:
        """After round r's aggregation and broadcast: report FV, keep Θ for evaluation when one is due."""
        n = self.fv_iterations
        if self.fv is not None:
            weights = " ".join(f"{name} {value:.3f}" for name, value in zip(self.parties, self.fv.w))
            lost = self.fv.not_finite_in_round
            lost = f"; {lost} candidate{'' if lost == 1 else 's'} not finite, ranked last" if lost else ""
            self.stream.write(f"  fv: {n} iteration{'' if n == 1 else 's'} this round, {self.fv.search.iteration} "
                              f"in all; w {weights}{lost}\n")
            self.stream.flush()
        if self.evaluation is not None:
            self.evaluation.schedule(r, theta)

    def finish(self) -> None:
        """Evaluate what is still due (the final Θ), drain FV, stop the dedicated validators."""
        self.flush_evaluations()
        if self.fv is not None:
            self.fv.drain()
        if self.pool is not None:
            self.pool.stop()

    def summary(self) -> str:
        """The table of held-out accuracy per set: the first evaluation next to the last."""
        return self.evaluation.summary() if self.evaluation is not None else ""

    def state_dict(self) -> dict:
        """FV's search state (w, candidate RNG, Moving Norm statistics) for the server's checkpoint."""
        if self.fv is None:
            return {"fv": None}
        return self.fv.state_dict()

    def load_state_dict(self, state: dict) -> None:
        if self.fv is not None and state.get("fv") is not None:
            self.fv.load_state_dict(state)
