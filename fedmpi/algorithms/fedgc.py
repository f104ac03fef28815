"""FedGC (Niu & Deng 2022, "Federated Learning for Face Recognition with Gradient Correction"; spec §1): each
party trains its margin softmax over its own identities (the usual local step, unchanged); after the round every
party's class embeddings W_k go to the server, which stacks W = [W_1; ...; W_P] and takes one plain step
W ← W − λη ∂Reg/∂W of the cross-client softmax regulariser (fedmpi/algorithms/gradient_correction.py: anchors
a_c = sg(ŵ_c), only cross-party pairs, scale s = the heads' model.scale), computed a block of anchors at a time,
then sends each party its rows back. The server sees every party's class embeddings; a party only its own.
The party keeps its classifier momentum as it is after the server's edit (class_momentum=keep; reset zeroes it)."""
from __future__ import annotations

from dataclasses import dataclass

from fedmpi.algorithms.class_parts import RowsPart
from fedmpi.algorithms.class_rules import RowRuleOptions
from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.algorithms.method import Method
from fedmpi.errors import ConfigError

ANCHORS = ("fixed", "moving")


@dataclass
class FedGCOptions(RowRuleOptions):
    scale: float = 0.0               # s of Reg; 0: the heads' model.scale
    anchors: str = "fixed"           # fixed (a_c = sg(ŵ_c), the adopted reading) | moving (anchors take a gradient too)

    def validate(self, cfg) -> None:
        super().validate(cfg)
        if self.anchors not in ANCHORS:
            raise ConfigError(f"fed.options.anchors: {self.anchors!r} is not one of {', '.join(ANCHORS)}")
        if self.scale < 0:
            raise ConfigError(f"fed.options.scale: must be >= 0 (0: model.scale), got {self.scale}")


class CrossClientCorrection(RowsPart):
    """The server's gradient-correction step on the stacked rows (s: fed.options.scale, else model.scale)."""
    columns = {"round": ((), "i8"), "reg": ((), "f8")}        # Reg(W) before the round's step

    def __init__(self, options=None, *, head_scale: float = 64.0):
        super().__init__(options)
        self.scale = options.scale or head_scale

    def step(self, W, bounds, lr, r, state):
        from fedmpi.algorithms.gradient_correction import correction_step

        o = self.options
        reg = correction_step(W, bounds, o.lr_scale * lr, self.scale, o.block_rows, o.anchors == "moving")
        return {"reg": reg}


FedGC = Method("fedgc", "FedGC", "#d62728", FedGCOptions, FedAvg, classes=CrossClientCorrection)
