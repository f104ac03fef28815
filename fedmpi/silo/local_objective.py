"""What a silo trainer rank hands its method's local objective (algorithms/objective.py): its batch streams, the
party's collectives (silo/party_comm.py), the public set (data.public) and its classifier rows
(model.init_classifier), frozen copies of the backbone."""
from __future__ import annotations

import torch

from fedmpi.algorithms.objective import FrozenBackbone, PartyTraining
from fedmpi.core.state import BackboneState
from fedmpi.models.backbone import build_backbone
from fedmpi.silo.party_comm import PartyCollectives
from fedmpi.silo.party_data import batch_stream


def open_public(cfg):
    """data.public's set, or None."""
    from fedmpi.data import open_training_set

    return open_training_set(cfg.data.public.spec(), cfg.data) if cfg.data.public.kind else None


def party_training(trainer, new_model) -> PartyTraining:
    """The trainer's PartyTraining (its classifier built, Θ received)."""
    cfg, party, device, dtype = trainer.cfg, trainer.party, trainer.device, trainer.dtype
    public = trainer.public

    def stream(dataset, start_step: int, seed=None, steps_per_pass: int = 0):
        return batch_stream(dataset, party, trainer.rank, cfg, start_step, device, seed=seed,
                            steps_per_pass=steps_per_pass)

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
    return PartyTraining(backbone=trainer.backbone, read_state=trainer.state.read, frozen_copy=frozen_copy,
                         random_state=random_state, global_theta=trainer.global_theta, dataset=trainer.dataset,
                         public=public, public_classifier=classifier_rows, classifier=trainer.classifier,
                         classifier_seed=trainer.classifier_seed,
                         collectives=PartyCollectives(trainer.groups.party, party.ranks.index(trainer.rank),
                                                      len(party.ranks), party.leader),
                         party_index=party.index, batch_size=trainer.batch_size, eval_batch=cfg.eval.batch_size,
                         seed=cfg.run.seed, K=cfg.fed.K, stream=stream,
                         prepare_images=trainer.speed.images, device=device, dtype=dtype)
