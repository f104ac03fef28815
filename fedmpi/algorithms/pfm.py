"""Partially Federated Momentum (FedFace, Alg. 1).

Trainer, each local step (eq. 3):  theta <- theta - eta_r * (g + beta * M / K),  g including weight decay.
Server (eq. 4):                    Theta_r = sum_i w_i theta_i.
Global momentum (eq. 5-6):         M_r = (Theta_{r-1} - Theta_r) / eta_r, rebuilt by every trainer from the
                                   previous and the new global model, so M is never sent.
The classifier's momentum (eq. 1-2) is local, plain momentum SGD, and lives with the trainer.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from fedmpi.algorithms.base import Algorithm, add_weight_decay, views


class PFM(Algorithm):
    """β is optim.momentum (the paper uses one β for the classifier, eq. 1-2, and the global momentum)."""
    name = "pfm"
    label, colour = "PFM", "#ff7f0e"     # in tables and figures (analysis/methods.py)
    global_state = ("global_momentum",)   # M is a function of the global models (eq. 6): one per trainer
    trainer_tensors = 1
    local_momentum_default = None         # eq. 3: the local step applies beta M / K (beta = optim.momentum)
    cohort_vectorisable = False           # M's parameter-shaped views are of one model's shapes

    def __init__(self, options=None, *, momentum: float = 0.9, **kw):
        super().__init__(options, **kw)
        self.beta = momentum
        self._views_of, self._views = None, []   # M and its parameter-shaped views (_momentum_views)

    @classmethod
    def from_config(cls, cfg, options, server, parts=None):
        return cls(options, momentum=cfg.optim.momentum, weight_decay=cfg.optim.weight_decay, server=server,
                   parts=parts)

    def init_trainer_state(self, params):
        import torch

        return {"global_momentum": torch.zeros(sum(p.numel() for p in params), dtype=params[0].dtype,
                                               device=params[0].device)}

    def local_step(self, params, grads, rnd, state):
        import torch

        add_weight_decay(grads, params, self.weight_decay)
        if self.beta:  # eq. 3, in one multi-tensor kernel over M's parameter-shaped views
            torch._foreach_add_(grads, self._momentum_views(state["global_momentum"], grads), alpha=self.beta / rnd.K)
        torch._foreach_add_(params, grads, alpha=-rnd.lr)

    def _momentum_views(self, M, like):
        """M's views shaped like the parameters, made once per M (M keeps its memory from step to step)."""
        if self._views_of is not M:
            self._views_of, self._views = M, views(M, like)
        return self._views

    def on_global(self, previous, new, lr, state):
        # eq. 6: M_r = beta*M_{r-1} + G_r = (Theta_{r-1} - Theta_r) / eta_r
        import torch

        torch.sub(previous, new, out=state["global_momentum"]).div_(lr)

    def previous_global(self, state, like):
        """M itself: after the round's local steps M is read no more until eq. 6 rewrites it from Θ_{r-1}."""
        return state["global_momentum"]
