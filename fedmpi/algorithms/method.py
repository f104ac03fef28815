"""A method, as a value (docs/ARCHITECTURE.md, "The map"): a backbone rule (a class of base.Algorithm: the client
and server hooks) with two parts, a class part (class_parts.py: nothing, the rows, a private summary) and a local
training (objective.py: the margin head for fed.K steps, or the method's own). Every name of the registry is one:
FedAvg is FedAvg's backbone with the default parts; FedAwS, FedGC and PrivacyFace are a class part over FedAvg's
backbone or over the registered rule fed.options.backbone names (registry.method); FedFR is its own local
training.

Its facts, what the config and the memory check read before torch, are its backbone's (payloads, states, server
optimizer, whether a cohort's steps stack) beside its parts' and its own (name, Options, the local momentum of its
paper). Building it (`from_config`, or calling it) builds the backbone rule with the parts handed to it. A Method
is never changed: `over` returns another. No torch at import."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from fedmpi.algorithms.class_parts import ClassPart
from fedmpi.algorithms.objective import LocalTraining

# the backbone rule's facts a method reads as its own (base.Algorithm declares them)
BACKBONE_FACTS = ("server_optimizer", "fixed_server_optimizer", "up", "down", "client_state", "global_state",
                  "trainer_tensors", "server_tensors", "aggregator", "cohort_vectorisable")


@dataclass(frozen=True)
class Parts:
    """What a method adds to its backbone rule, handed to the rule when it is built: its registry name, its class
    part (an instance) and its local training (a class)."""
    name: str
    classes: ClassPart
    training: type[LocalTraining]


@dataclass(frozen=True)
class Method:
    """`backbone` the rule class whose hooks train and aggregate, `classes` the class part's class, `training` the
    local training; label, colour: its name and colour in tables and figures (analysis/methods.py)."""
    name: str
    label: str
    colour: str
    Options: type
    backbone: type
    classes: type[ClassPart] = ClassPart
    training: type[LocalTraining] = LocalTraining
    local_momentum_default: float | None = 0.0

    @classmethod
    def of(cls, rule: type) -> "Method":
        """A rule class as the method of its own backbone and the default parts."""
        return cls(rule.name, rule.label, rule.colour, rule.Options, rule,
                   local_momentum_default=rule.local_momentum_default)

    def __getattr__(self, fact: str):
        if fact in BACKBONE_FACTS:
            return getattr(self.backbone, fact)
        raise AttributeError(f"{type(self).__name__} {self.name!r} has no attribute {fact!r}")

    def averages_at_server(self) -> bool:
        return self.backbone.averages_at_server()

    @property
    def has_parts(self) -> bool:
        return self.classes is not ClassPart or self.training is not LocalTraining

    def over(self, backbone: type, Options: type) -> "Method":
        """This method over another backbone rule, its fed.options read by `Options` (registry.method picks both
        from fed.options.backbone)."""
        return dataclasses.replace(self, backbone=backbone, Options=Options)

    def __call__(self, options=None, *, head_scale: float = 64.0, **kw):
        """The rule built from options (its defaults where None) and its backbone's keywords (weight_decay,
        local_momentum, server; PFM's momentum)."""
        options = options if options is not None else self.Options()
        return self.backbone(options, parts=self._parts(options, head_scale), **kw)

    def from_config(self, cfg, options, server):
        return self.backbone.from_config(cfg, options, server, parts=self._parts(options, cfg.model.scale))

    def _parts(self, options, head_scale: float) -> Parts:
        named = getattr(options, "backbone", self.backbone.name)
        if named != self.backbone.name:
            raise ValueError(f"{self.name} over {self.backbone.name}, its options naming backbone {named}: build it "
                             f"as registry.method(name, options) gives it")
        return Parts(self.name, self.classes(options, head_scale=head_scale), self.training)
