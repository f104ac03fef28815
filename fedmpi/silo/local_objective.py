"""What a silo trainer rank hands its rule's local objective (algorithms/objective.py), and the objective's own
optimizer: the public set (data.public) and its classifier rows (model.init_classifier), frozen copies of the
backbone, the party's group and place."""
from __future__ import annotations

import torch

from fedmpi.algorithms.objective import FrozenBackbone, PartyTraining
from fedmpi.core.state import BackboneState
from fedmpi.models.backbone import build_backbone


def open_public(cfg):
    """data.public's set, or None."""
    from fedmpi.data import open_training_set

    return open_training_set(cfg.data.public.spec(), cfg.data) if cfg.data.public.kind else None


def party_training(trainer, public, new_model) -> PartyTraining:
    """The trainer's PartyTraining (its classifier built, Θ received)."""
    cfg, party, device, dtype = trainer.cfg, trainer.party, trainer.device, trainer.dtype

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
                         classifier_seed=trainer.classifier_seed, group=trainer.groups.party,
                         rank=party.ranks.index(trainer.rank), ranks=len(party.ranks), leader=party.leader,
                         party_index=party.index, batch_size=trainer.batch_size, eval_batch=cfg.eval.batch_size,
                         seed=cfg.run.seed,
                         prepare_images=trainer.speed.images, device=device, dtype=dtype)
