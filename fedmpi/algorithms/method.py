"""A method the registry composes from parts (docs/ARCHITECTURE.md, "The map"): a backbone rule (the
client and server hooks of base.Algorithm: FedAvg's local SGD, or FedFace's PFM where fed.options.backbone names
it), a class part (class_parts.py: nothing, the rows, a private summary) and a local training (objective.py: the
margin head for fed.K steps, or the method's own). FedAwS, FedGC, PrivacyFace and FedFR are such compositions.

To the config a Method reads like a rule class (name, Options, the local momentum of its paper, its parts' facts);
calling it, or from_config, builds the backbone rule with the parts attached. No torch at import."""
from __future__ import annotations

from fedmpi.algorithms.class_parts import ClassPart
from fedmpi.algorithms.objective import LocalTraining


def fedavg_backbone(options, *, momentum: float, weight_decay: float, local_momentum: float, server):
    from fedmpi.algorithms.fedavg import FedAvg

    return FedAvg(options, weight_decay=weight_decay, local_momentum=local_momentum, server=server)


def pfm_backbone(options, *, momentum: float, weight_decay: float, local_momentum: float, server):
    from fedmpi.algorithms.pfm import PFM

    return PFM(options, momentum=momentum, weight_decay=weight_decay, server=server)


BACKBONES = {"fedavg": fedavg_backbone, "pfm": pfm_backbone}


class Method:
    """`name` its registry name, `Options` its fed.options; the backbone rule is BACKBONES[options.backbone]
    (FedAvg's where the options name none); `classes` the class part's class, `training` the local training."""
    server_optimizer = "sgd"             # what fed.server.optimizer=auto means: the backbones' plain step
    fixed_server_optimizer = False
    cohort_vectorisable = True
    up: tuple[str, ...] = ()
    down: tuple[str, ...] = ()
    # the memory check's facts (base.Algorithm), as the default backbone (FedAvg's) has them
    client_state: tuple[str, ...] = ()
    global_state: tuple[str, ...] = ()
    trainer_tensors = server_tensors = 0

    def __init__(self, name: str, label: str, colour: str, Options, *, classes: type[ClassPart] = ClassPart,
                 training: type[LocalTraining] = LocalTraining, local_momentum_default: float = 0.0):
        """label, colour: its name and colour in tables and figures (analysis/methods.py)."""
        self.name, self.label, self.colour = name, label, colour
        self.Options, self.classes, self.training = Options, classes, training
        self.local_momentum_default = local_momentum_default

    @staticmethod
    def averages_at_server() -> bool:
        return True                      # FedAvg's and PFM's server step: the weighted average itself (eq. 4)

    def __call__(self, options=None, *, head_scale: float = 64.0, momentum: float = 0.9, weight_decay: float = 0.0,
                 local_momentum: float = 0.0, server=None):
        options = options if options is not None else self.Options()
        backbone = BACKBONES[getattr(options, "backbone", "fedavg")](
            options, momentum=momentum, weight_decay=weight_decay, local_momentum=local_momentum, server=server)
        return backbone.composed(self.name, self.classes(options, head_scale=head_scale), self.training)

    def from_config(self, cfg, options, server):
        return self(options, head_scale=cfg.model.scale, momentum=cfg.optim.momentum,
                    weight_decay=cfg.optim.weight_decay, local_momentum=cfg.fed.local_momentum or 0.0, server=server)
