"""The shape every federated rule shares (Flower's Strategy, fedjax's FederatedAlgorithm, on flat tensors):

  trainer side   init_trainer_state(params)               state kept across rounds (checkpointed)
                 local_step(params, grads, rnd, state)    one backbone step of the K local steps
                 end_round(params, rnd, state)            fill the up payloads (rnd.up) after the K steps
                 on_global(previous, new, lr, state)      the new global Θ arrived (PFM rebuilds M, eq. 6)
                 previous_global(state, like)             where `previous` is kept (None: on_global reads none)
  server side    init_server_state(theta)                 state kept across rounds (checkpointed)
                 server_update(theta, mean, state)        Θ from Σ w_i θ_i (and the up payloads' weighted
                                                          means), in place; down payloads live in state

A method is this backbone rule with two more parts, each a class with a default that does nothing new
(method.py composes them; the trainer and the server call every part of every method):
  classes    class_parts.ClassPart      what a party's classifier contributes beyond θ (nothing; its rows; a summary)
  training   objective.LocalTraining    how a party trains a round (the margin head for fed.K steps; FedFR's)

`up` / `down` name the extra payloads a rule moves besides θ_i and Θ, each of the size of the trainable
parameters; the roles pack them after the backbone in one flat buffer. `client_state` / `global_state` name
the trainer-state keys that must survive a round where a trainer rank trains other clients each round (the
cross-device simulation): those that belong to one client (SCAFFOLD's c_i, kept for it between its rounds)
and those that `on_global` rebuilds from the global models (PFM's M, the same on every trainer); any other key
starts afresh for every client and round there. A silo party keeps its whole trainer state; where a party's ranks
share a node on CPU, its global_state is one copy per node and only the node's keeper calls on_global, which
therefore writes nothing but global_state keys. No MPI here: the
roles move the tensors, a rule only does arithmetic on them. `params`, `grads` are lists of parameter tensors;
`state` is a plain dict of tensors so that checkpoints store it as is.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch

from fedmpi.aggregation.aggregators import WeightedMean
from fedmpi.algorithms.class_parts import ClassPart
from fedmpi.algorithms.method import Parts
from fedmpi.algorithms.objective import LocalTraining
from fedmpi.algorithms.server_optim import ServerOptimizer


@dataclass
class NoOptions:
    """A rule without options of its own (fed.options must be empty)."""

    def validate(self, cfg) -> None:
        pass


@dataclass
class LocalRound:
    """What a trainer's local steps of one round see besides the parameters and the gradients."""
    lr: float
    K: int
    global_params: list[torch.Tensor]                      # Θ at the round's start, shaped like params
    down: dict[str, list[torch.Tensor]] = field(default_factory=dict)   # the round's down payloads
    up: dict[str, list[torch.Tensor]] = field(default_factory=dict)     # the up payloads, to fill
    step: int = 0                                          # index of the local step within the round


class Algorithm:
    name: ClassVar[str] = "base"
    label: ClassVar[str] = "base"                    # its name in tables and figures (analysis/methods.py)
    colour: ClassVar[str] = "#7f7f7f"
    Options: ClassVar[type] = NoOptions      # the fed.options section
    server_optimizer: ClassVar[str] = "sgd"  # what fed.server.optimizer=auto means for this rule
    fixed_server_optimizer: ClassVar[bool] = False   # True: fed.server.optimizer may not name another one
    up: ClassVar[tuple[str, ...]] = ()
    down: ClassVar[tuple[str, ...]] = ()
    client_state: ClassVar[tuple[str, ...]] = ()     # trainer-state keys that follow a client across rounds
    # what the memory check counts before torch (memory/model.py): the trainer state's tensors of n values besides
    # local momentum, and the server state's under the rule's own server optimizer
    trainer_tensors: ClassVar[int] = 0
    server_tensors: ClassVar[int] = 0
    global_state: ClassVar[tuple[str, ...]] = ()     # trainer-state keys that on_global rebuilds from Θ
    aggregator: ClassVar[type] = WeightedMean        # how the server combines the uploads (fedmpi/aggregation)
    # The local optimizer of the rule's paper: the heavy-ball momentum of its local SGD (0.0: plain SGD), what
    # fed.local_momentum is when a config leaves it empty. None: the rule's local step carries a momentum of its
    # own (PFM's M, MIME-lite's server momentum) and does not read fed.local_momentum.
    local_momentum_default: ClassVar[float | None] = 0.0
    classes: ClassVar = ClassPart                    # the class part (an instance of it on a rule)
    training: ClassVar = LocalTraining               # the local training part
    # Whether the local step may run on a cohort's parameters stacked along a leading client dimension
    # (crossdevice/cohort.py): its arithmetic element by element, Θ and the down payloads broadcast over the
    # clients. False for a rule that reshapes what it reads (PFM's flat M).
    cohort_vectorisable: ClassVar[bool] = True
    def __init__(self, options=None, *, weight_decay: float = 0.0, local_momentum: float = 0.0,
                 server: ServerOptimizer | None = None, parts: Parts | None = None):
        """parts: the method this rule is the backbone of (method.Method builds it so); None: the rule alone."""
        self.options = options if options is not None else self.Options()
        self.weight_decay = weight_decay
        self.local_momentum = local_momentum
        self.server = server if server is not None else ServerOptimizer.build("sgd")
        if parts is None:
            parts = Parts(type(self).name, ClassPart(self.options), type(self).training)
        self.name, self.classes, self.training = parts.name, parts.classes, parts.training

    @classmethod
    def from_config(cls, cfg, options, server: ServerOptimizer, parts: Parts | None = None) -> "Algorithm":
        return cls(options, weight_decay=cfg.optim.weight_decay, local_momentum=cfg.fed.local_momentum,
                   server=server, parts=parts)

    # ---- trainer side
    def init_trainer_state(self, params: list[torch.Tensor]) -> dict:
        import torch

        if not self.local_momentum:
            return {}
        return {"momentum": [torch.zeros_like(p) for p in params]}

    def local_step(self, params: list[torch.Tensor], grads: list[torch.Tensor], rnd: LocalRound,
                   state: dict) -> None:
        """Local (momentum) SGD, PyTorch's convention; rules change the gradient first. Mutates grads."""
        add_weight_decay(grads, params, self.weight_decay)
        self.correct(params, grads, rnd, state)
        momentum_sgd(params, grads, rnd.lr, self.local_momentum, state.get("momentum"))

    def correct(self, params, grads, rnd: LocalRound, state: dict) -> None:
        """Change the weight-decayed gradient before the step (FedProx, SCAFFOLD, MIME-lite)."""

    def end_round(self, params: list[torch.Tensor], rnd: LocalRound, state: dict) -> None:
        """After the K local steps: fill rnd.up."""

    def on_global(self, previous: torch.Tensor, new: torch.Tensor, lr: float, state: dict) -> None:
        """Called on every trainer after a round with the previous and new global parameters (flat)."""

    def previous_global(self, state: dict, like: torch.Tensor) -> torch.Tensor | None:
        """Where a trainer keeps the previous Θ's trainable values (flat, like `like`) for on_global: None when
        on_global reads none (nothing is kept); PFM lends M's own memory, which eq. 6 rebuilds from it."""
        import torch

        if type(self).on_global is Algorithm.on_global:
            return None
        return torch.empty_like(like)

    @property
    def leaves_party(self) -> str:
        """What crosses from a party to the server, in words (printed at start, kept in the log)."""
        what = ["backbone", *self.up, "its aggregation weight" if "weight" in self.training.upload_columns else "",
                self.classes.leaves]
        return ", ".join(w for w in what if w)

    # ---- server side
    def init_server_state(self, theta: torch.Tensor, down: dict[str, torch.Tensor] | None = None) -> dict:
        """The server optimizer's state; rules with down payloads keep them (views into the global payload,
        zero at the start) in this dict, so that a checkpoint restores what the trainers are sent."""
        return self.server.init(theta)

    @classmethod
    def averages_at_server(cls) -> bool:
        """server_averages under the rule's own server optimizer, from the class alone (the memory check)."""
        return (not cls.up and not cls.down and cls.server_optimizer == "sgd"
                and cls.server_update is Algorithm.server_update)

    @property
    def server_averages(self) -> bool:
        """Θ after the server step is the weighted average itself (FedAvg, PFM: eq. 4), with no payload besides
        θ: the roles may then form the average straight into Θ and skip server_update."""
        return (not self.up and not self.down and self.server.averages
                and type(self).server_update is Algorithm.server_update)

    def server_update(self, theta: torch.Tensor, mean: dict[str, torch.Tensor], state: dict,
                      participation: float = 1.0) -> torch.Tensor:
        """Θ ← server optimizer step on Δ = Θ − Σ_i w_i θ_i (mean["theta"]), in place; returns theta.
        mean[name]: Σ_i w_i of each up payload; participation: fraction of all clients that took part."""
        return self.server.apply(theta, mean["theta"], state)


def add_weight_decay(grads: list[torch.Tensor], params: list[torch.Tensor], weight_decay: float) -> None:
    import torch

    if weight_decay:
        torch._foreach_add_(grads, params, alpha=weight_decay)


def momentum_sgd(params, grads, lr: float, momentum: float, buffers: list | None) -> None:
    """PyTorch's SGD (no dampening, not Nesterov): buf <- momentum*buf + g; p <- p - lr*buf."""
    import torch

    if momentum:
        torch._foreach_mul_(buffers, momentum)
        torch._foreach_add_(buffers, grads)
        torch._foreach_add_(params, buffers, alpha=-lr)
    else:
        torch._foreach_add_(params, grads, alpha=-lr)


def views(flat: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    """The parameter-shaped views of a flat buffer (no copy)."""
    out, offset = [], 0
    for p in like:
        n = p.numel()
        out.append(flat[offset:offset + n].view_as(p))
        offset += n
    return out
