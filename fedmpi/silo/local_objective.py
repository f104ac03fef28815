"""What a silo trainer rank hands its method's local objective (algorithms/objective.py): its batch streams, the
party's collectives (silo/party_comm.py), the public set (data.public) and its classifier rows
(model.init_classifier), frozen copies of the backbone."""
from __future__ import annotations

import torch

from fedmpi.algorithms.objective import FrozenBackbone, PartyTraining, RoundData
from fedmpi.core.state import BackboneState
from fedmpi.models.backbone import build_backbone
from fedmpi.silo.party_comm import PartyCollectives
from fedmpi.silo.party_data import batch_stream


def open_public(cfg):
    """data.public's set, or None."""
    from fedmpi.data import open_training_set

    return open_training_set(cfg.data.public.spec(), cfg.data) if cfg.data.public.kind else None


def party_training(cfg, party, rank: int, groups, head, backbone, state, global_theta, dataset, batch_size: int,
                   speed, new_model, device, dtype) -> PartyTraining:
    """A trainer rank's PartyTraining: `head` its margin classifier (silo/party_parts.PartyHead), `state` its
    backbone's flat state, `global_theta` the received Θ, `new_model()` another model like the backbone."""
    public = head.public

    def stream(dataset, start_step: int, seed=None, steps_per_pass: int = 0):
        return batch_stream(dataset, party, rank, cfg, start_step, device, seed=seed, steps_per_pass=steps_per_pass)

    def rounds(start_round: int):
        """The party's one stream from round start_round's first step, fed.K steps a round."""
        data = RoundData(stream(dataset, start_round * cfg.fed.K), cfg.fed.K)
        return lambda r: data

    def frozen_copy() -> FrozenBackbone:
        with torch.random.fork_rng(devices=[]):     # building a model seeds torch: the run's generators stay
            model = new_model()
        return FrozenBackbone(model, BackboneState(model).write)

    def random_state(seed: int) -> torch.Tensor:
        with torch.random.fork_rng(devices=[]):
            return BackboneState(build_backbone(cfg, device, dtype, seed=seed)).read()

    classifier_rows = None
    if public is not None and cfg.model.init_classifier:
        from fedmpi.models.pretrained import read_public_classifier

        classifier_rows = read_public_classifier(cfg.model.init_classifier, public.num_classes,
                                                 cfg.model.embedding_size)
    return PartyTraining(backbone=backbone, read_state=state.read, frozen_copy=frozen_copy,
                         random_state=random_state, global_theta=global_theta, dataset=dataset,
                         public=public, public_classifier=classifier_rows, classifier=head.classifier,
                         classifier_seed=head.seed,
                         collectives=PartyCollectives(groups.party, party.ranks.index(rank), len(party.ranks),
                                                      party.leader),
                         party_index=party.index, batch_size=batch_size, eval_batch=cfg.eval.batch_size,
                         seed=cfg.run.seed, K=cfg.fed.K, stream=stream, rounds=rounds, prepare_images=speed.images,
                         device=device, dtype=dtype)
