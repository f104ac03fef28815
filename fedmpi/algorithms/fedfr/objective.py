"""FedFR's local objective on one trainer rank of a party (fedfr/rule.py says what a round does; the part is
algorithms/objective.py), with its schedule of local epochs (spec §4.3-6; `o`: the rule's FedFROptions). The
party's state, kept across rounds and never uploaded: `previous` (the backbone the party trained last round, the
contrastive term's negative: a flat state like Θ) and `personal` (the personal head A, V_k, b); its private rows
W_k live in the trainer's classifier, with the public rows after them."""
from __future__ import annotations

import numpy as np
import torch

from fedmpi.algorithms.fedfr.hard_negatives import hard_negative_pass
from fedmpi.algorithms.objective import LocalObjective, PartyTraining, RoundData
from fedmpi.data.combined import CombinedFaceDataset
from fedmpi.models.class_centres import init_class_centres
from fedmpi.models.contrastive import model_contrastive
from fedmpi.models.personal_head import PersonalHead

STREAM_SALT = 0xFED5   # a round's stream: (run seed, party, round, this)
RANDOM_SALT = 0xFED0   # the freshly initialised network of round 1's previous backbone: (run seed, party, this)


def write_public_rows(classifier, rows: torch.Tensor, first: int) -> None:
    """Classifier rows [first, first + len(rows)) := rows, on the rank holding them (its block [class_start,
    class_end) of a sharded classifier; every row of a replicated one)."""
    lo, hi = max(classifier.class_start, first), min(classifier.class_end, first + rows.shape[0])
    if lo < hi:
        with torch.no_grad():
            weight = classifier.weight
            weight[lo - classifier.class_start:hi - classifier.class_start] = rows[lo - first:hi - first].to(weight)


def local_epochs(r: int, o) -> int:
    """E_r, round r's local epochs (0-based r): first_epochs, then max(min_epochs, E − epoch_step) each round."""
    return o.first_epochs if r == 0 else max(o.min_epochs, o.first_epochs - o.epoch_step * r)


def decay_epochs(r: int, o) -> int:
    """Round r's StepLR step in local epochs: first_decay in round 1, then max(1, floor(3 E_r / 4))."""
    return o.first_decay if r == 0 else max(1, (3 * local_epochs(r, o)) // 4)


def round_lr(lr: float, epoch: int, r: int, o) -> float:
    """The learning rate of local epoch `epoch` of round r: the round's lr x gamma^floor(epoch / decay)."""
    return lr * o.lr_gamma ** (epoch // decay_epochs(r, o))


class FedFRObjective(LocalObjective):
    def __init__(self, options, party: PartyTraining):
        self.o, self.party = options, party
        self.local, self.public = party.dataset, party.public
        self.identities = self.local.num_classes
        self.public_classes = self.public.num_classes if self.public is not None else 0
        d = party.backbone.embedding_size
        # V_k starts as the party's classifier rows W_k (the same seeded rows, on every rank of any rank count)
        rows = init_class_centres(party.classifier_seed, 0, self.identities, d, party.dtype).to(party.device)
        # the public rows of every round ("reset") or of round 1 ("keep"): the pretrained classifier
        # (model.init_classifier), else the classifier's own seeded rows of those classes
        self.public_rows = (party.public_classifier if party.public_classifier is not None or self.public is None
                            else init_class_centres(party.classifier_seed, self.identities,
                                                    self.identities + self.public_classes, d, torch.float64))
        o = options
        self.head = PersonalHead(rows, o.bce_scale, o.bce_margin, o.bce_lambda, o.bce_power).to(party.device)
        self.global_copy, self.previous_copy = party.frozen_copy(), party.frozen_copy()
        self.previous = party.random_state(int(np.random.SeedSequence([party.seed, party.party_index,
                                                                         RANDOM_SALT]).generate_state(1)[0]))
        self._contrast = False
        self._numbers: dict = {}
        self._round = (0, 1, 1, 0.0)     # r, steps per epoch, decay epochs, the round's lr

    def start(self, r: int) -> None:
        """Nothing: each round has a stream of its own (begin_round)."""

    def state(self) -> dict:
        return {"previous": self.previous, "personal": self.head.state_dict()}

    def begin_round(self, r: int, lr: float) -> RoundData:
        o, party = self.o, self.party
        self.global_copy.load(party.global_theta)
        self.previous_copy.load(party.global_theta if r == 0 and o.previous_start == "global" else self.previous)
        self._contrast = o.mu > 0 and not (r == 0 and o.previous_start == "none")
        if self.public is not None and (o.public_rows == "reset" or r == 0):
            write_public_rows(party.classifier, self.public_rows, self.identities)
        chosen = (hard_negative_pass(party.backbone, self.local, self.public, o.threshold, party)
                  if self.public is not None else np.empty(0, np.int64))
        combined = CombinedFaceDataset(self.local, self.public, chosen)
        per_pass = len(combined) // party.party_batch      # the code's drop_last; a set under one batch wraps
        epochs = local_epochs(r, o)
        steps = epochs * max(per_pass, 1)
        self._round = (r, max(per_pass, 1), decay_epochs(r, o), lr)
        self._numbers = {"hard_negatives": len(chosen), "combined_images": len(combined), "local_epochs": epochs,
                         "local_steps": steps}
        seed = [party.seed, party.party_index, r, STREAM_SALT]
        return RoundData(party.stream(combined, 0, seed=seed, steps_per_pass=per_pass), steps)

    def lr(self, step: int) -> float:
        r, per_epoch, _, lr = self._round
        return round_lr(lr, step // per_epoch, r, self.o)

    def loss(self, images, embeddings, labels, head_loss):
        o = self.o
        total = head_loss
        if o.bce_weight:
            total = total + o.bce_weight * self.head(embeddings, labels)
        if self._contrast:
            total = total + o.mu * model_contrastive(embeddings, self.global_copy(images), self.previous_copy(images),
                                                     o.tau)
        return total

    def parameters(self) -> list:
        return list(self.head.parameters()) if self.o.bce_weight else []

    def end_round(self, r: int) -> None:
        """φ_prev of the next round: this round's backbone θ_k as the party uploads it, the leader's (the other
        ranks hold the same parameters but BatchNorm statistics of their own batches)."""
        self.party.read_state(self.previous)
        self.party.collectives.broadcast(self.previous)

    def weight(self) -> float:
        return float(self._numbers["combined_images"])

    def personal(self, embeddings):
        return self.head.convert(embeddings)

    def columns(self) -> dict:
        return dict(self._numbers)
