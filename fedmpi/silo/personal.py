"""A party leader's personalised evaluation (metrics/personal.py, spec §4.5 scaled down): its personal model,
the party's backbone right after its local training followed by the rule's personal transform (FedFR's converter;
none for other rules), on the pool of every party's held-out images, the party's own first; the 1:N gallery from
its own training images. Every leader reads every party's held-out set (data.heldout): the protocol's pool, not
training data. Run when the held-out evaluation is due; the metrics go to the server with the round's
statistics (the log's `personal` table)."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from fedmpi.metrics.embed import set_batches
from fedmpi.metrics.personal import personal_metrics
from fedmpi.silo.party_data import open_party_sets


class PersonalEvaluation:
    def __init__(self, cfg, layout, party, train_set, heldout, device, dtype):
        self.fars, self.batch = list(cfg.eval.personal_fars), cfg.eval.batch_size
        self.device, self.dtype = device, dtype
        self.train_set = train_set
        pool, first = [], 0          # (held-out set, its images' identities numbered across the parties)
        for other in layout.parties:
            held = heldout if other.name == party.name else open_party_sets(other, cfg.data)[1]
            if other.name == party.name:
                pool.insert(0, (held, first + held.labels))
                self.own_first = first
            else:
                pool.append((held, first + held.labels))
            first += held.num_classes
        self.pool = [held for held, _ in pool]
        self.pool_ids = np.concatenate([ids for _, ids in pool])
        self.own = len(heldout)

    def _features(self, model, personal, dataset, indices) -> np.ndarray:
        out = []
        for _, images in set_batches(dataset, indices, self.batch):
            features = personal(model(images.to(device=self.device, dtype=self.dtype)))
            out.append(F.normalize(features.to(torch.float64), dim=1).cpu().numpy())
        return np.concatenate(out)

    def __call__(self, model, personal) -> dict[str, float]:
        was_training = model.training
        model.eval()
        with torch.no_grad():
            pool = np.concatenate([self._features(model, personal, held, np.arange(len(held))) for held in self.pool])
            train = self._features(model, personal, self.train_set, np.arange(len(self.train_set)))
        model.train(was_training)
        labels = self.train_set.labels
        identities = np.unique(labels)
        gallery = np.stack([train[labels == c].mean(axis=0) for c in identities])
        return personal_metrics(pool, self.pool_ids, self.own, gallery, self.own_first + identities, self.fars)
