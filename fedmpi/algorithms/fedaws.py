"""FedAwS (Yu et al. 2020, "Federated Learning with Only Positive Labels") in its cross-silo form (spec §2): each
party trains its margin softmax over its own identities (the usual local step); after the round every party's
class embeddings W_k go to the server, which stacks W = [W_1; ...; W_P], takes a spreadout step on it
(fedmpi/algorithms/spreadout.py: the cosine form, τ = 0.4, mean over the ordered pairs, a party's own pairs
included) and sends each party its rows back. The server sees every party's class embeddings; a party only its
own. mode=paper: one plain step W ← W − λη∇L (η the round's learning rate); mode=fedfr: FedFR's FedAwS baseline,
20 steps of SGD with momentum 0.9, lr 10η, weight decay 5e-4 and a fresh optimizer every round (no state is kept).
Which rows are stepped on (spec §2.7 item 4), `rows`:
- all: every row, all pairs (Aggarwal's FedFace; fedmpi/algorithms/spreadout.py);
- cohort: the round's parties' rows alone, stacked and spread among themselves, each other's only negatives, all of
  them moving (FedFR's code: its server's SpreadOut stacks the round's clients' rows): the all-rows step on the
  round's rows;
- round: the round's parties' rows as anchors, each against every row of W as a fixed negative, only the anchors
  moving (fedmpi/algorithms/spreadout_round.py): every seen identity pushes, the step O(cohort · M · d) where all is
  O(M² d). Its mean runs over |A|(C − 1) pairs, not C(C − 1), and an anchor's pairs with the other anchors enter
  from both ends, so on the same rows its gradient points almost as the all-rows one does but is about
  C / (2|A|) + 1/2 times longer where the pushes are spread evenly (docs/BASELINES.md).
In the silo every party takes part every round, so the three are the all-rows step; across devices only a cohort
does."""
from __future__ import annotations

from dataclasses import dataclass

from fedmpi.algorithms.class_parts import RowsPart
from fedmpi.algorithms.class_rules import RowRuleOptions
from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.algorithms.method import Method
from fedmpi.errors import ConfigError

ROWS = ("round", "cohort", "all")   # the round's rows against all of W | the round's rows alone | every row
MODES = {"paper": None, "fedfr": {"steps": 20, "momentum": 0.9, "lr_scale": 10.0, "weight_decay": 5e-4}}


@dataclass
class FedAwSOptions(RowRuleOptions):
    tau: float = 0.4                 # cosine threshold τ (FedFR's margin; ν = 2(1 − τ) in the squared-Euclidean form)
    top_k: int = 0                   # 0: every other row; k: the k nearest other rows of each row
    mode: str = "paper"              # paper (one plain step of λη) | fedfr (FedFR's baseline: 20 momentum steps)
    rows: str = "round"              # round: the round's rows against all of W | cohort: among themselves (FedFR) | all

    def validate(self, cfg) -> None:
        super().validate(cfg)
        if self.mode not in MODES:
            raise ConfigError(f"fed.options.mode: {self.mode!r} is not one of {', '.join(MODES)}")
        if self.rows not in ROWS:
            raise ConfigError(f"fed.options.rows: {self.rows!r} is not one of {', '.join(ROWS)} (the rows the server's "
                              f"spreadout moves: the round's against every row, the round's among themselves, or every "
                              f"row)")
        if not -1 < self.tau < 1:
            raise ConfigError(f"fed.options.tau: must be in (-1, 1), got {self.tau}")
        if self.top_k < 0:
            raise ConfigError(f"fed.options.top_k: must be >= 0 (0: every pair), got {self.top_k}")

    def schedule(self) -> dict:
        """The server's optimizer: steps, momentum, lr multiplier of η, weight decay."""
        return MODES[self.mode] or {"steps": 1, "momentum": 0.0, "lr_scale": self.lr_scale, "weight_decay": 0.0}


class Spreadout(RowsPart):
    """The server's spreadout step on the stacked rows."""
    columns = {"round": ((), "i8"), "spreadout": ((), "f8")}   # L before the round's step

    def step(self, W, bounds, lr, r, state):
        from fedmpi.algorithms.spreadout import spreadout_step

        o, s = self.options, self.options.schedule()
        loss = spreadout_step(W, s["lr_scale"] * lr, o.tau, o.top_k, steps=s["steps"], momentum=s["momentum"],
                              weight_decay=s["weight_decay"], block=o.block_rows)
        return {"spreadout": loss}

    @property
    def anchored(self) -> bool:
        return self.options.rows != "all"

    def step_round(self, W, bounds, anchors, lr, r, state):
        o = self.options
        if o.rows == "all":
            return self.step(W, bounds, lr, r, state)
        if o.rows == "cohort":
            rows = W[anchors]
            loss = self.step(rows, bounds, lr, r, state)
            W[anchors] = rows
            return loss
        from fedmpi.algorithms.spreadout_round import round_spreadout_step

        s = o.schedule()
        loss = round_spreadout_step(W, anchors, s["lr_scale"] * lr, o.tau, o.top_k, steps=s["steps"],
                                    momentum=s["momentum"], weight_decay=s["weight_decay"], block=o.block_rows)
        return {"spreadout": loss}


FedAwS = Method("fedaws", "FedAwS", "#e377c2", FedAwSOptions, FedAvg, classes=Spreadout)
