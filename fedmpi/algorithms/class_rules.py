"""The options the methods that move class embeddings share (FedAwS, FedGC, PrivacyFace; docs/BASELINES.md): each
is a composition (method.py) of a backbone rule, their papers' local SGD (FedAvg's), FedFace's PFM (eq. 3,
`backbone: pfm`) or another registered rule `backbone` names, with the method's own class part. They run
in the silo setting, and across devices too where the clients hold faces (validate_devices)."""
from __future__ import annotations

from dataclasses import dataclass

from fedmpi.algorithms.registry import backbone_rule
from fedmpi.errors import ConfigError

CLASS_MOMENTUM = ("keep", "reset")
# the backbones whose local step carries a momentum of its own (local_momentum_default None)
OWN_MOMENTUM = {"pfm": "global momentum (eq. 3)", "mime_lite": "server momentum (fed.options.momentum)"}


@dataclass
class ClassRuleOptions:
    backbone: str = "fedavg"         # the backbone rule: fedavg (local SGD, the papers') | pfm (FedFace's M) | any
                                     # registered rule without parts of its own (registry.backbones), its options beside these

    def validate(self, cfg) -> None:
        rule = cfg.fed.algorithm
        backbone = backbone_rule(self.backbone, rule)
        if cfg.cross_device:
            self.validate_devices(cfg)
        if backbone.local_momentum_default is None and cfg.fed.local_momentum:
            raise ConfigError(f"fed.local_momentum: {rule} with fed.options.backbone={self.backbone} steps the "
                              f"backbone with {backbone.label}'s {OWN_MOMENTUM.get(self.backbone, 'own momentum')}; "
                              f"leave fed.local_momentum empty or 0")

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
