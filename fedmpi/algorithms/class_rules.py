"""What the rules that move class embeddings share (FedAwS, FedGC, PrivacyFace; docs/BASELINES.md): the
backbone's local step is their papers' local SGD (FedAvg's) or FedFace's PFM (eq. 3, `backbone: pfm`), the
server averages the backbones as FedAvg does, and the class payload is the rule's own. They run in the silo
setting only (the cross-device simulation has no per-party classifier)."""
from __future__ import annotations

from dataclasses import dataclass

from fedmpi.algorithms.base import Algorithm
from fedmpi.algorithms.pfm import PFM
from fedmpi.errors import ConfigError

BACKBONES = ("fedavg", "pfm")
CLASS_MOMENTUM = ("keep", "reset")


@dataclass
class ClassRuleOptions:
    backbone: str = "fedavg"         # the backbone's local step: fedavg (local SGD, the papers') | pfm (FedFace's M)

    def validate(self, cfg) -> None:
        rule = cfg.fed.algorithm
        if self.backbone not in BACKBONES:
            raise ConfigError(f"fed.options.backbone: {self.backbone!r} is not one of {', '.join(BACKBONES)}")
        if cfg.cross_device:
            raise ConfigError(f"fed.algorithm: {rule} moves each party's class embeddings, which the cross-device "
                              f"simulation's clients do not keep: run it with silo parties (clients.population=0)")
        if self.backbone == "pfm" and cfg.fed.local_momentum:
            raise ConfigError(f"fed.local_momentum: {rule} with fed.options.backbone=pfm steps the backbone with "
                              f"PFM's global momentum (eq. 3); leave fed.local_momentum empty or 0")

    def check_positive(self, *names: str) -> None:
        for name in names:
            if not getattr(self, name) > 0:
                raise ConfigError(f"fed.options.{name}: must be > 0, got {getattr(self, name)}")


@dataclass
class RowRuleOptions(ClassRuleOptions):
    """The rules whose server steps on the stacked class embeddings (FedAwS, FedGC)."""
    lr_scale: float = 1.0            # λ: the server's step is λ·η, η the round's learning rate
    block_rows: int = 2048           # anchor rows per block of the server's step (its memory: rows x C values)
    class_momentum: str = "keep"     # the party's classifier momentum after the server edited W_k: keep | reset

    def validate(self, cfg) -> None:
        super().validate(cfg)
        if self.class_momentum not in CLASS_MOMENTUM:
            raise ConfigError(f"fed.options.class_momentum: {self.class_momentum!r} is not one of "
                              f"{', '.join(CLASS_MOMENTUM)}")
        self.check_positive("lr_scale", "block_rows")


class ClassEmbeddingRule(Algorithm):
    """FedAvg's backbone rule, or PFM's with backbone=pfm (its trainer hooks, its global_state M)."""
    Options = ClassRuleOptions
    local_momentum_default = 0.0     # the papers' clients: plain local SGD

    def __init__(self, options=None, *, momentum: float = 0.9, **kw):
        super().__init__(options, **kw)
        self.pfm = PFM(momentum=momentum, weight_decay=self.weight_decay) if self.options.backbone == "pfm" else None
        self.global_state = PFM.global_state if self.pfm else ()

    @classmethod
    def from_config(cls, cfg, options, server):
        return cls(options, momentum=cfg.optim.momentum, weight_decay=cfg.optim.weight_decay,
                   local_momentum=cfg.fed.local_momentum or 0.0, server=server)

    def init_trainer_state(self, params):
        return self.pfm.init_trainer_state(params) if self.pfm else super().init_trainer_state(params)

    def local_step(self, params, grads, rnd, state):
        if self.pfm:
            self.pfm.local_step(params, grads, rnd, state)
        else:
            super().local_step(params, grads, rnd, state)

    def on_global(self, previous, new, lr, state):
        if self.pfm:
            self.pfm.on_global(previous, new, lr, state)

    def previous_global(self, state, like):
        return self.pfm.previous_global(state, like) if self.pfm else None

    @property
    def resets_class_momentum(self) -> bool:
        """Whether a party zeroes its classifier momentum once the server's rows are written into its classifier."""
        return getattr(self.options, "class_momentum", "keep") == "reset"
