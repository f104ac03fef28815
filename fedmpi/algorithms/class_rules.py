"""The options the methods that move class embeddings share (FedAwS, FedGC, PrivacyFace; docs/BASELINES.md): each
is a composition (method.py) of a backbone rule, their papers' local SGD (FedAvg's) or FedFace's PFM (eq. 3,
`backbone: pfm`), whose server averages the backbones as FedAvg does, with the method's own class part. They run
in the silo setting, and across devices too where the clients hold faces (validate_devices)."""
from __future__ import annotations

from dataclasses import dataclass

from fedmpi.algorithms.method import BACKBONES
from fedmpi.errors import ConfigError

CLASS_MOMENTUM = ("keep", "reset")


@dataclass
class ClassRuleOptions:
    backbone: str = "fedavg"         # the backbone's local step: fedavg (local SGD, the papers') | pfm (FedFace's M)

    def validate(self, cfg) -> None:
        rule = cfg.fed.algorithm
        if self.backbone not in BACKBONES:
            raise ConfigError(f"fed.options.backbone: {self.backbone!r} is not one of {', '.join(BACKBONES)}")
        if cfg.cross_device:
            self.validate_devices(cfg)
        if self.backbone == "pfm" and cfg.fed.local_momentum:
            raise ConfigError(f"fed.local_momentum: {rule} with fed.options.backbone=pfm steps the backbone with "
                              f"PFM's global momentum (eq. 3); leave fed.local_momentum empty or 0")

    def validate_devices(self, cfg) -> None:
        """Across devices the class embeddings are the face clients' own (one row per identity a client holds, kept
        in the server's per-client store): a rows part steps on them as on the parties' stacked W; a summary part
        (PrivacyFace) clusters them on the device and the server relays the clusters to the next cohort."""
        rule = cfg.fed.algorithm
        if not cfg.clients.face_clients:
            raise ConfigError(f"fed.algorithm: {rule} moves class embeddings, which clients of clients.dataset="
                              f"{cfg.clients.dataset} do not keep: use clients.dataset=faces or silo parties "
                              f"(clients.population=0)")

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
