"""The `clients` section: the cross-device simulation of Hsu et al. (2019), on when population > 0."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedmpi.config.parties import DataSpec
from fedmpi.config.rules import algorithm_method
from fedmpi.config.sections import fv_runs


BATCH_NORM_MODES = ("frozen", "batch")     # clients.batch_norm (models/frozen_batch_norm.py)


def clients_per_round(population: int, fraction: float) -> int:
    """max(floor(C M), 1) (Hsu et al., Algorithm 1)."""
    return max(int(np.floor(fraction * population + 1e-9)), 1)


@dataclass
class ClientsConfig:
    """Virtual clients trained one after another on `ranks` trainer ranks (the parties are then unused). Client
    batch: optim.batch_size; client lr: optim.lr (constant); weight decay: optim.weight_decay; client momentum:
    fed.local_momentum; the server step: fed.server (FedAvgM: momentum, lr, nesterov)."""
    population: int = 0              # M virtual clients (0: the silo parties train)
    fraction: float = 0.1            # C: max(floor(C M), 1) clients report each round
    images: int = 500                # n images per client
    alpha: float = 1.0               # label skew: q_k ~ Dir(alpha p); 0 = one class per client
    partition_seed: int = 0
    sampler_seed: int = 0
    epochs: int = 1                  # E local epochs per round
    rounds: int = 100
    ranks: int = 2                   # trainer ranks the clients are spread over
    dataset: str = "synthetic"       # synthetic | cifar10 (a cifar-10-batches-py folder at clients.path) | faces
    # faces: a phone per person (Yu et al.'s and Aggarwal et al.'s setting): clients drawn from a face training set,
    # each holding identities_per_client identities (its owner; a few for an album) and their class embeddings
    faces: DataSpec = field(default_factory=lambda: DataSpec(identities=500, images_per_identity=10))
    identities_per_client: int = 1
    positive_margin: float = 0.9     # ν_pos of the positive-only loss (max(0, ν_pos − ŵ_c·f̂(x)))² (spec §2.3)
    # frozen: a face client's BatchNorm layers normalise by Θ's running statistics (one identity's batch statistics
    # would subtract what its images share, models/frozen_batch_norm.py); batch: by each batch's own
    batch_norm: str = "frozen"
    path: str = ""
    train_images: int = 50000        # synthetic only
    test_images: int = 10000         # synthetic only
    augment: bool = False            # random crop (pad 4) and horizontal flip; off, as in the paper
    eval_images: int = 0             # test images per evaluation (0: the whole test set)
    # sequential: a trainer rank's clients one after another; vectorised: those of equal size as one batch
    # (crossdevice/cohort.py); auto: vectorised on a GPU where the rule allows it, else sequential
    cohort: str = "sequential"
    dropout: float = 0.0             # with fed.secure_aggregation: a sampled client misses each stage with this
                                     # probability (simulated per round and stage; the log's `secagg` table)

    @property
    def face_clients(self) -> bool:
        """Whether the clients hold faces (an IResNet, their own class embeddings) rather than CIFAR images."""
        return self.population > 0 and self.dataset == "faces"

    def vectorised(self, cfg, device_type: str) -> bool:
        """Whether a trainer rank trains its clients of equal size as one batch on `device_type` (never the face
        clients: the stacked cohort carries no model buffers, BatchNorm's statistics, nor a client's own rows w_c,
        crossdevice/cohort.py)."""
        if self.face_clients:
            return False
        if self.cohort == "auto":
            return device_type == "cuda" and algorithm_method(cfg).cohort_vectorisable
        return self.cohort == "vectorised"

    def validate(self, cfg, fail) -> None:
        if self.population == 0:
            return
        for key in ("population", "images", "epochs", "rounds", "ranks"):
            if getattr(self, key) <= 0:
                fail(f"clients.{key}", f"must be > 0, got {getattr(self, key)}")
        if not 0 < self.fraction <= 1:
            fail("clients.fraction", f"must be in (0, 1], got {self.fraction}")
        if not self.alpha >= 0:
            fail("clients.alpha", f"must be >= 0, got {self.alpha}")
        if self.dataset == "synthetic" and (self.train_images <= 0 or self.test_images <= 0):
            fail("clients.train_images", f"the synthetic set needs train and test images, got "
                                         f"{self.train_images}, {self.test_images}")
        if self.dataset == "faces":
            self.validate_faces(cfg, fail)
        central = cfg.fed.setting == "centralized"
        if self.dataset == "synthetic" and not central and self.population * self.images > self.train_images:
            fail("clients.images", f"{self.population} clients x {self.images} images exceed the "
                                   f"{self.train_images} training images")
        if self.dataset == "cifar10" and not self.path:
            fail("clients.path", "clients.dataset cifar10 needs the cifar-10-batches-py folder")
        if self.eval_images < 0:
            fail("clients.eval_images", f"must be >= 0, got {self.eval_images}")
        if self.cohort == "vectorised" and not algorithm_method(cfg).cohort_vectorisable:
            fail("clients.cohort", f"vectorised: {cfg.fed.algorithm}'s local step cannot run on stacked clients "
                                   "(Algorithm.cohort_vectorisable); use clients.cohort=sequential or auto")
        if cfg.fed.setting == "solo":
            fail("fed.setting", "solo picks a silo party; cross-device runs (clients.population > 0) are "
                                "federated or centralized")
        if fv_runs(cfg):
            fail("fv.enabled", "FV weights silo parties; cross-device clients (clients.population > 0) have none")
        if not 0 <= self.dropout < 1:
            fail("clients.dropout", f"must be in [0, 1), got {self.dropout}")
        if self.dropout and not cfg.fed.secure_aggregation.enabled:
            fail("clients.dropout", "simulates clients missing a stage of secure aggregation: set "
                                    "fed.secure_aggregation.mode")

    def validate_faces(self, cfg, fail) -> None:
        self.faces.validate(fail, "clients.faces")
        if self.identities_per_client <= 0:
            fail("clients.identities_per_client", f"must be > 0, got {self.identities_per_client}")
        if not 0 < self.positive_margin <= 1:
            fail("clients.positive_margin", f"ν_pos is a cosine: must be in (0, 1], got {self.positive_margin}")
        if self.faces.kind == "synthetic" and self.population * self.identities_per_client > self.faces.identities:
            fail("clients.population", f"{self.population} clients x {self.identities_per_client} identities "
                                       f"exceed the {self.faces.identities} identities of clients.faces")
        if self.batch_norm not in BATCH_NORM_MODES:
            fail("clients.batch_norm", f"must be one of {', '.join(BATCH_NORM_MODES)}, got {self.batch_norm!r}")
        if self.cohort == "vectorised":
            fail("clients.cohort", "vectorised: the face clients' IResNet keeps BatchNorm statistics (updated in "
                                   "place by each client with clients.batch_norm=batch, read from Θ when frozen) and "
                                   "each client its own rows w_c, which the stacked cohort does not carry; use "
                                   "clients.cohort=sequential")
        if cfg.fed.setting == "centralized":
            fail("fed.setting", "centralized: one client holding every face has every class embedding; the face "
                                "clients (clients.dataset=faces) run federated")
