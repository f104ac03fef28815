"""The shape every federated rule shares (Flower's Strategy, fedjax's FederatedAlgorithm, on flat tensors):

  trainer side   init_trainer_state(params)               state kept across rounds (checkpointed)
                 local_step(params, grads, rnd, state)    one backbone step of the K local steps
                 end_round(params, rnd, state)            fill the up payloads (rnd.up) after the K steps
                 on_global(previous, new, lr, state)      the new global Θ arrived (PFM rebuilds M, eq. 6)
                 previous_global(state, like)             where `previous` is kept (None: on_global reads none)
  server side    init_server_state(theta)                 state kept across rounds (checkpointed)
                 server_update(theta, mean, state)        Θ from Σ w_i θ_i (and the up payloads' weighted
                                                          means), in place; down payloads live in state

  a party's own local training (a rule with a local objective; algorithms/objective.py, FedFR)
                 local_objective(party)                   the objective a party's trainer ranks train: its loss
                                                          beside the margin head's, its parameters, the round's
                                                          data and length, the party's state it keeps
                 weighs_parties                           the party's upload comes with its weight (the
                                                          objective's), which replaces w (FedFR: |D_k ∪ H_k|)

  class embeddings (a rule with `class_payload`; fedmpi/silo/classes.py moves them, docs/BASELINES.md)
                 class_due(r)                             whether they travel in round r
  "rows"         class_step(W, bounds, lr, state)         the server's step on the stacked W = [W_1; ...; W_P]
                                                          (in place); each party gets its rows back
  "summary"      summarise(W_k, out, r, party, state)     the party leader's summary of its gathered W_k
                 relay(uploads, replies, r, state)        the server's relay: each party's reply from the others'
                                                          summaries, kept by the party as extra negatives

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
    Options: ClassVar[type] = NoOptions      # the fed.options section
    server_optimizer: ClassVar[str] = "sgd"  # what fed.server.optimizer=auto means for this rule
    fixed_server_optimizer: ClassVar[bool] = False   # True: fed.server.optimizer may not name another one
    up: ClassVar[tuple[str, ...]] = ()
    down: ClassVar[tuple[str, ...]] = ()
    client_state: ClassVar[tuple[str, ...]] = ()     # trainer-state keys that follow a client across rounds
    global_state: ClassVar[tuple[str, ...]] = ()     # trainer-state keys that on_global rebuilds from Θ
    aggregator: ClassVar[type] = WeightedMean        # how the server combines the uploads (fedmpi/aggregation)
    # The local optimizer of the rule's paper: the heavy-ball momentum of its local SGD (0.0: plain SGD), what
    # fed.local_momentum is when a config leaves it empty. None: the rule's local step carries a momentum of its
    # own (PFM's M, MIME-lite's server momentum) and does not read fed.local_momentum.
    local_momentum_default: ClassVar[float | None] = 0.0
    # What of a party's class embeddings W_k leaves it: "" nothing (FedFace's invariant: the classifier never leaves
    # its party); "rows" W_k itself, to the server, which corrects the stacked rows and sends each party its own back
    # (FedAwS, FedGC); "summary" a summary the party's leader makes of W_k, which the server relays to the other
    # parties (PrivacyFace's DP clusters). Chosen by the rule alone; printed at a run's start and kept in its log.
    class_payload: ClassVar[str] = ""
    class_columns: ClassVar[dict] = {}              # the log's `classes` table: what class_step / relay return
    # Whether the local step may run on a cohort's parameters stacked along a leading client dimension
    # (crossdevice/cohort.py): its arithmetic element by element, Θ and the down payloads broadcast over the
    # clients. False for a rule that reshapes what it reads (PFM's flat M).
    cohort_vectorisable: ClassVar[bool] = True
    # True: the rule trains over data.public's identities as well (its parties' classifiers hold their rows, from
    # model.init_classifier): FedFR
    public_identities: ClassVar[bool] = False
    # True: each party's leader sends the weight its local objective gives with its upload, and the server's w is
    # those weights normalised (FedFR: the combined-set sizes); the config refuses FV beside it
    weighs_parties: ClassVar[bool] = False
    # True: each round's local steps start from zero momentum, a new local optimizer per round (FedFR's clients):
    # the backbone's, the classifier's and the local objective's
    fresh_local_optimizer: ClassVar[bool] = False
    # the per-party numbers of a round the local objective reports (the log's `local` table, one [P] column each)
    party_columns: ClassVar[tuple[str, ...]] = ()

    def __init__(self, options=None, *, weight_decay: float = 0.0, local_momentum: float = 0.0,
                 server: ServerOptimizer | None = None):
        self.options = options if options is not None else self.Options()
        self.weight_decay = weight_decay
        self.local_momentum = local_momentum
        self.server = server if server is not None else ServerOptimizer.build("sgd")

    @classmethod
    def from_config(cls, cfg, options, server: ServerOptimizer) -> "Algorithm":
        return cls(options, weight_decay=cfg.optim.weight_decay, local_momentum=cfg.fed.local_momentum,
                   server=server)

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

    def local_objective(self, party):
        """The party's own local training (algorithms/objective.py: a LocalObjective built from the trainer's
        PartyTraining), or None: the margin head over the party's identities for fed.K steps a round."""
        return None

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
        what = ["backbone", *self.up]
        if self.weighs_parties:
            what.append("its aggregation weight")
        if self.class_payload == "rows":
            what.append("class embeddings")
        elif self.class_payload == "summary":
            what.append("differentially private clusters of the class embeddings")
        return ", ".join(what)

    # ---- class embeddings (rules with class_payload)
    def class_due(self, r: int) -> bool:
        """Whether the class payload travels in round r (0-based)."""
        return bool(self.class_payload)

    def summary_shape(self, d: int) -> tuple[int, int]:
        """"summary": the [rows, columns] a party's summary of its d-dimensional class embeddings takes."""
        raise NotImplementedError

    def summarise(self, W: torch.Tensor, out: torch.Tensor, r: int, party: int, state: dict) -> None:
        """"summary": on the party's leader, fill `out` from the party's gathered class embeddings W [n_k, d]."""
        raise NotImplementedError

    def class_step(self, W: torch.Tensor, bounds: list[tuple[int, int]], lr: float, r: int, state: dict) -> dict:
        """"rows": the server's step on the stacked class embeddings W [C, d], party k's rows W[bounds[k]], in
        place; lr: the round's learning rate. Returns the round's row of the log's `classes` table."""
        raise NotImplementedError

    def relay(self, uploads: torch.Tensor, replies: torch.Tensor, r: int, state: dict) -> dict:
        """"summary": each party's reply [P, (P-1) rows, columns] from the summaries [P, rows, columns]. Returns the
        round's row of the log's `classes` table."""
        raise NotImplementedError

    def class_note(self, state: dict) -> str:
        """The end of the round's progress line (PrivacyFace: the ε spent so far), or ''."""
        return ""

    def class_summary(self, state: dict) -> str:
        """A line for the run's closing summary, or ''."""
        return ""

    # ---- server side
    def init_server_state(self, theta: torch.Tensor, down: dict[str, torch.Tensor] | None = None) -> dict:
        """The server optimizer's state; rules with down payloads keep them (views into the global payload,
        zero at the start) in this dict, so that a checkpoint restores what the trainers are sent."""
        return self.server.init(theta)

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
