"""A method's local training part: how a participant trains a round, a silo party's trainer ranks or a device
client. `LocalTraining` is the part as the registry composes it (its facts, read by the config, the memory check
and the trainers, and `objective`, which builds the runtime objective on each trainer rank of either setting); the
default is the head's loss over the participant's own batches: a party's fed.K steps a round from its one stream,
a client's E epochs over its images. FedFR's is its own (algorithms/fedfr/; silo parties only).

The trainer keeps what every method shares: the backbone (and a party's mean gradient), the head (a party's margin
classifier, sharded or replicated, over the public identities' rows too where `public_identities`; a client's own
class rows or logits, crossdevice/client_heads.py), the backbone rule's step, the exchange, checkpoints. It calls
the hooks of the objective each round and each step (across devices a rank's one objective trains its clients one
after another, each client's local epochs one round of the objective: its view, `PartyTraining.rounds`, gives the
batches of the client being trained):

  start(r)                          the round the trainer starts at (after a resume too)
  begin_round(r, lr) -> RoundData   after the global Θ arrived: the round's batches and its number of steps
  lr(step)                          the learning rate of the round's local step (backbone, classifier, its own)
  loss(images, f, labels, head)     the step's loss from the head's (`head`) and the embeddings f
  end_round(r)                      after the round's steps, before the upload
silo parties only (the default's are empty, and no training with its own runs across devices):
  parameters()                      trained beside the backbone and the classifier (the classifier's momentum
                                    SGD, weight decay and lr), replicated on the party's ranks: the trainer makes
                                    their gradients the party's mean, as the backbone's
  weight()                          the party's weight of the round (a part with the upload column `weight`)
  personal(f)                       the party's personal features from the backbone's (the personalised
                                    evaluation), f itself by default
  state()                           the party's state it keeps across rounds, as tensors it updates in place:
                                    checkpointed by the leader with the rule's trainer state, restored on every
                                    rank of the party (on another rank count too), never uploaded
  columns()                         the round's numbers for the log's `local` table (LocalTraining.columns)

The objective is built once per trainer rank, after the trainer's head (whose rows it may write). A silo party's
collectives are the party's (PartyTraining.collectives, silo/party_comm.py); torch only."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar


@dataclass
class PartyTraining:
    """What a trainer rank hands its rule's local objective: a silo party's view, or a device client's (the
    fields after `dtype` left at their defaults: a client has no public set, no collectives, no stream to resume)."""
    backbone: Any                    # the participant's model, trained in place
    dataset: Any                     # its training set (a party's held-out images excluded; a device rank's clients)
    batch_size: int                  # images per rank and step
    seed: int                        # run.seed
    rounds: Callable                 # rounds(start_round) -> round(r) -> RoundData: the participant's own batches
                                     # of round r and its steps (a party: fed.K steps of its one stream, resumed at
                                     # start_round; a client: its E epochs, crossdevice/local_training.py)
    device: Any
    dtype: Any
    read_state: Callable = None      # read_state(out): the backbone's flat state [D] into `out`
    frozen_copy: Callable = None     # frozen_copy(): a FrozenBackbone (another model like it, eval mode, no grad)
    random_state: Callable = None    # random_state(seed): the flat state of a freshly initialised model like it
    global_theta: Any = None         # Θ of the round's start, flat (what the party received; read, never written)
    public: Any = None               # data.public's set, or None
    public_classifier: Any = None    # model.init_classifier's rows [public classes, d] (float64, CPU), or None
    classifier: Any = None           # the party's margin classifier (this rank's rows [class_start, class_end))
    classifier_seed: int = 0         # the seed of its initial rows (models/class_centres.py)
    collectives: Any = None          # the party's collectives (silo/party_comm.py: rank, ranks, gather_rows,
                                     # broadcast from the leader)
    party_index: int = 0
    eval_batch: int = 0              # images per forward of a no-grad pass
    K: int = 0                       # fed.K, the default round's local steps
    stream: Callable = None          # stream(dataset, start_step, seed=None, steps_per_pass=0): this rank's
                                     # batches of a set (the party's own stream where seed is None)
    prepare_images: Callable = None  # the trainer's image layout for its backbone (channels_last)

    @property
    def party_batch(self) -> int:
        """Images per party step: what a pass over a set of N images is cut into (floor(N / party_batch) steps)."""
        return self.batch_size * self.collectives.ranks


@dataclass
class RoundData:
    """The round's training: `steps` local steps over `batches` (this rank's (images, labels), labels in the
    classifier's rows)."""
    batches: Any
    steps: int


class FrozenBackbone:
    """A model like the party's backbone that holds a flat state it is given (`load`), evaluated without grad."""

    def __init__(self, module, write: Callable):
        self.module, self._write = module, write
        module.eval()
        for p in module.parameters():
            p.requires_grad_(False)

    def load(self, flat) -> None:
        self._write(flat)

    def __call__(self, images):
        import torch

        with torch.no_grad():
            return self.module(images)


class LocalObjective:
    """The default: the head's loss over the participant's own batches of a round (a party's one stream, resumable
    at any step; a client's epochs), no parameters or state of its own, the personal model the backbone itself."""

    def __init__(self, options, party: PartyTraining):
        self.party = party
        self._lr = 0.0
        self._rounds = None

    def start(self, r: int) -> None:
        self._rounds = self.party.rounds(r)

    def state(self) -> dict:
        return {}

    def begin_round(self, r: int, lr: float) -> RoundData:
        self._lr = lr
        return self._rounds(r)

    def lr(self, step: int) -> float:
        return self._lr

    def loss(self, images, embeddings, labels, head_loss):
        return head_loss

    def parameters(self) -> list:
        return []

    def end_round(self, r: int) -> None:
        pass

    def weight(self) -> float:
        return 1.0

    def personal(self, embeddings):
        return embeddings

    def columns(self) -> dict:
        return {}


class LocalTraining:
    """The part as the registry composes it: the default local training, and the facts a method's own declares."""
    public_identities: ClassVar[bool] = False   # it trains over data.public's identities too (the party's
                                                # classifier holds their rows after its own, model.init_classifier)
    upload_columns: ClassVar[tuple[str, ...]] = ()   # one value each at the end of the leader's upload, from
                                                # objective.<name>(), gathered with it: `weight` makes the server's
                                                # w those values normalised (the config refuses FV); the
                                                # aggregation and the upload check read the rows without them
    fresh_optimizer: ClassVar[bool] = False     # each round's local steps start from zero momentum: a new local
                                                # optimizer per round (backbone's, classifier's, its own)
    columns: ClassVar[tuple[str, ...]] = ()     # the per-party numbers of a round (the log's `local` table)
    kept_states: ClassVar[int] = 0              # flat states of D values it keeps on every trainer rank (memory)

    @staticmethod
    def objective(options, party: PartyTraining) -> LocalObjective:
        return LocalObjective(options, party)
