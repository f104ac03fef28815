"""What a silo trainer rank (silo/trainer.py) is made of besides its model, each built by one function from what
it is given: the exchange's buffers, the party's margin classifier, the rule's trainer state, and what a local
step updates beside the backbone (the classifier's and the objective's parameters, their momentum SGDs, the
party-mean gradients)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedmpi.core.payloads import Payloads
from fedmpi.models.sgd import MomentumSGD
from fedmpi.silo.local_objective import open_public
from fedmpi.silo.party_gradients import PartyGradients


def exchange_buffers(state, algorithm, is_leader: bool, node, speed, device, dtype) -> tuple[Payloads, Payloads]:
    """(down, up): the global payload [Θ | down payloads] received, the upload [θ_i | up payloads | the
    training's upload columns] sent (θ_i and the columns only on the leader, the one rank of the party that sends
    it); down on the node's shared memory where `node` shares it."""
    down = Payloads(state, algorithm.down, device, dtype, zeros=node.zeros if node else None)
    up = Payloads(state, algorithm.up, device, dtype, with_theta=is_leader,
                  columns=algorithm.training.upload_columns if is_leader else ())
    if is_leader and device.type == "cpu" and not speed.channels_last:
        state.live_in(up.theta)   # the leader's model is its upload's θ_i: one copy, not two
    return down, up


@dataclass
class PartyHead:
    """The party's margin classifier over its identities (and over data.public's after them, for a training
    that reads them: `public`, else None), its initial rows drawn from `seed`."""
    classifier: Any
    seed: int
    public: Any


def party_head(cfg, party, dataset, training, group, device, dtype) -> PartyHead:
    from fedmpi.models.classifier import build_classifier

    m = cfg.model
    public = open_public(cfg) if training.public_identities else None
    seed = cfg.run.seed + 1 + party.index
    classes = dataset.num_classes + (public.num_classes if public is not None else 0)
    classifier = build_classifier(classes, m.embedding_size, kind=m.head, scale=m.scale, margin=cfg.margin,
                                  group=group, mode=m.classifier, sample_rate=m.sample_rate, seed=seed,
                                  dtype=dtype).to(device)
    return PartyHead(classifier, seed, public)


def rule_state(algorithm, trainable, node, down_trainable) -> tuple[dict, Any]:
    """(the rule's trainer state, its global_state one copy per node; Θ's trainable values before the next global
    model arrives, for on_global, or None where the rule reads none)."""
    algo_state = algorithm.init_trainer_state(trainable)
    if node:   # what on_global rebuilds from Θ is the same on every rank of the party: one copy per node
        algo_state.update({key: node.like(algo_state[key]) for key in algorithm.global_state})
    return algo_state, algorithm.previous_global(algo_state, down_trainable)


@dataclass
class StepParts:
    """What a local step updates beside the backbone: `extra` (the classifier's parameters, then the objective's
    own), stepped by `optimizers` (the classifier's momentum SGD, eq. 1-2, then one over the objective's, as the
    classifier's), and `averaged`, the gradients made the party's mean after backward."""
    extra: list
    optimizers: list
    averaged: list

    @property
    def classifier_optimizer(self) -> MomentumSGD:
        return self.optimizers[0]


def step_parts(objective, classifier, party_gradients, group, optim, fused: bool) -> StepParts:
    """The classifier's parameters and the objective's own, each stepped by a momentum SGD at optim's lr,
    momentum and weight decay (the classifier's `fused` where the GPU runs it so); the objective's gradients the
    party's mean as the backbone's (DDP averages a GPU party's backbone in backward; `party_gradients` a CPU
    party's, else None)."""
    o = optim
    own = objective.parameters()
    optimizers = [MomentumSGD(classifier.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay,
                              fused=fused)]   # eq. 1-2
    if own:
        optimizers.append(MomentumSGD(own, lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay))
    averaged = [g for g in (party_gradients,) if g is not None]
    if own and group is not None:
        averaged.append(PartyGradients(own, group))
    return StepParts([*classifier.parameters(), *own], optimizers, averaged)
