"""What a silo trainer rank (silo/trainer.py) is made of besides its model: the exchange's buffers, the party's
margin classifier and its optimizer, the rule's trainer state, the method's local objective with its own
parameters and their optimizer."""
from __future__ import annotations

from fedmpi.core.payloads import Payloads
from fedmpi.models.sgd import MomentumSGD
from fedmpi.silo.local_objective import open_public, party_training
from fedmpi.silo.party_gradients import PartyGradients


class PartyParts:
    """Built by Trainer.__init__, in this order."""

    def _payloads(self) -> None:
        """The exchange's buffers: the global payload [Θ | down payloads] received, the upload [θ_i | up
        payloads | the training's upload columns] sent (θ_i and the columns only on the leader, the one rank of the
        party that sends it)."""
        self.down = Payloads(self.state, self.algorithm.down, self.device, self.dtype,
                             zeros=self.node.zeros if self.node else None)
        self.up = Payloads(self.state, self.algorithm.up, self.device, self.dtype, with_theta=self.is_leader,
                           columns=self.training.upload_columns if self.is_leader else ())
        if self.is_leader and self.device.type == "cpu" and not self.speed.channels_last:
            self.state.live_in(self.up.theta)   # the leader's model is its upload's θ_i: one copy, not two
        self.global_theta = self.down.theta

    def _classifier_and_state(self) -> None:
        """The party's margin classifier (over the public identities too, for a training that reads them) and
        its optimizer (eq. 1-2); the rule's trainer state, its global_state one copy per node."""
        o = self.cfg.optim
        self.public = open_public(self.cfg) if self.training.public_identities else None
        self.classifier_seed = self.cfg.run.seed + 1 + self.party.index
        extra_classes = self.public.num_classes if self.public is not None else 0
        self.classifier = self._build_classifier(extra_classes).to(self.device)
        self.forward = self.speed.compiled(self.model)
        self.loss = self.speed.compiled(self.classifier) if self.groups.party is None else self.classifier
        self.classifier_opt = MomentumSGD(self.classifier.parameters(), lr=o.lr, momentum=o.momentum,
                                          weight_decay=o.weight_decay, fused=self.speed.fused)  # eq. 1-2
        self.algo_state = self.algorithm.init_trainer_state(self.state.trainable)
        if self.node:   # what on_global rebuilds from Θ is the same on every rank of the party: one copy per node
            self.algo_state.update({key: self.node.like(self.algo_state[key]) for key in self.algorithm.global_state})
        # Θ's trainable values before the next global model arrives, for on_global (None: the rule reads none)
        self.previous_global = self.algorithm.previous_global(self.algo_state, self.down.trainable)

    def _objective(self, new_model, party_gradients) -> None:
        """The party's local objective, its state kept with the rule's trainer state, its own parameters stepped
        as the classifier's are, their gradients the party's mean as the backbone's (DDP averages a GPU party's
        backbone in backward)."""
        o, group = self.cfg.optim, self.groups.party
        self.objective = self.training.objective(self.algorithm.options, party_training(self, new_model))
        self.algo_state.update(self.objective.state())
        extra = self.objective.parameters()
        self.extra = [*self.classifier.parameters(), *extra]      # stepped beside the backbone
        self.optimizers = [self.classifier_opt, *([MomentumSGD(extra, lr=o.lr, momentum=o.momentum,
                                                               weight_decay=o.weight_decay)] if extra else [])]
        self.averaged = [g for g in (party_gradients,) if g is not None]
        if extra and group is not None:
            self.averaged.append(PartyGradients(extra, group))

    def _build_classifier(self, extra_classes: int = 0):
        """The party's margin classifier over its identities (and `extra_classes` rows after them: the public
        identities of a rule that trains over them)."""
        from fedmpi.models.classifier import build_classifier

        m, cfg = self.cfg.model, self.cfg
        return build_classifier(self.dataset.num_classes + extra_classes, m.embedding_size, kind=m.head,
                                scale=m.scale, margin=cfg.margin, group=self.groups.party, mode=m.classifier,
                                sample_rate=m.sample_rate, seed=self.classifier_seed, dtype=self.dtype)
