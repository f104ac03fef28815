"""The seam a rule's own local training plugs into (FedFR): `Algorithm.local_objective(party)` returns a
LocalObjective, which a silo party's trainer ranks then train instead of the margin head alone for fed.K steps.

The trainer (silo/trainer.py) keeps what every rule shares: the backbone and its party-mean gradient, the party's
margin classifier (sharded or replicated; over the public identities' rows too for a rule with
`public_identities`), the rule's backbone step,
the exchange, checkpoints. The objective adds, each round and each step:

  begin_round(r, lr) -> RoundData   after the global Θ arrived: the round's training set, its steps and stream
  lr(step)                          the learning rate of the round's local step (backbone, classifier, its own)
  loss(images, f, labels, head)     the step's loss from the margin head's (`head`) and the embeddings f
  parameters()                      trained beside the backbone and the classifier (the classifier's momentum
                                    SGD, weight decay and lr), replicated on the party's ranks: the trainer makes
                                    their gradients the party's mean, as the backbone's
  end_round(r)                      after the round's steps, before the upload
  weight()                          the party's weight of the round (a rule with `weighs_parties`)
  personal(f)                       the party's personal features from the backbone's (the personalised
                                    evaluation), f itself by default
  state()                           the party's state it keeps across rounds, as tensors it updates in place:
                                    checkpointed by the leader with the rule's trainer state, restored on every
                                    rank of the party (on another rank count too), never uploaded
  columns()                         the round's numbers for the log's `local` table (Algorithm.party_columns)

The objective is built once per trainer rank, after the trainer's classifier (whose rows it may write). No MPI
beyond the party's group it is given; torch only."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass
class PartyTraining:
    """What a party's trainer rank hands its rule's local objective."""
    backbone: Any                    # the party's model, trained in place
    read_state: Callable             # read_state(out): the backbone's flat state [D] into `out`
    frozen_copy: Callable            # frozen_copy(): a FrozenBackbone (another model like it, eval mode, no grad)
    random_state: Callable           # random_state(seed): the flat state of a freshly initialised model like it
    global_theta: Any                # Θ of the round's start, flat (what the party received; read, never written)
    dataset: Any                     # the party's training set (its held-out images excluded)
    public: Any                      # data.public's set, or None
    public_classifier: Any           # model.init_classifier's rows [public classes, d] (float64, CPU), or None
    classifier: Any                  # the party's margin classifier (this rank's rows [class_start, class_end))
    classifier_seed: int             # the seed of its initial rows (models/class_centres.py)
    group: Any                       # the party's process group (None: one rank)
    rank: int                        # this rank's place in the party
    ranks: int                       # the party's rank count
    leader: int                      # the party leader's global rank (whose model the party uploads)
    party_index: int
    batch_size: int                  # images per rank and step
    eval_batch: int                  # images per forward of a no-grad pass
    seed: int                        # run.seed
    prepare_images: Callable         # the trainer's image layout for its backbone (channels_last)
    device: Any
    dtype: Any

    @property
    def party_batch(self) -> int:
        """Images per party step: what a pass over a set of N images is cut into (floor(N / party_batch) steps)."""
        return self.batch_size * self.ranks


@dataclass
class RoundData:
    """The round's training: `dataset` (labels in the classifier's rows), `steps` local steps, the stream's
    `seed` and its `steps_per_pass` (passes of floor(N / party batch) steps, the rest of a pass dropped: a shuffled
    DataLoader's drop_last)."""
    dataset: Any
    steps: int
    steps_per_pass: int
    seed: int


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
    """The defaults: no parameters of its own, the personal model the backbone itself."""

    def state(self) -> dict:
        return {}

    def begin_round(self, r: int, lr: float) -> RoundData:
        raise NotImplementedError

    def lr(self, step: int) -> float:
        raise NotImplementedError

    def loss(self, images, embeddings, labels, head_loss):
        return head_loss

    def parameters(self) -> list:
        return []

    def end_round(self, r: int) -> None:
        pass

    def weight(self) -> float:
        raise NotImplementedError

    def personal(self, embeddings):
        return embeddings

    def columns(self) -> dict:
        return {}
