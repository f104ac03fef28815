"""FedFR (Liu et al., AAAI 2022, "FedFR: Joint Optimization Federated Framework for Generic and Personalized Face
Recognition"; spec §4, nearly all of it read in the authors' code, docs/BASELINES.md): federated fine-tuning of a
pretrained model (model.init) across parties that also hold the public identities it was trained on (data.public,
model.init_classifier). Each round, on each party, from the global backbone Θ it received:

  1. hard negatives: the public images whose best cosine to one of the party's images is > threshold (0.4);
  2. the combined set: its images (labels 0..n_k−1) and those (labels n_k + public identity);
  3. E_r local epochs over it (10, 8, 6, 4, 4, ...; lr × 0.1 every 8, 6, 4, 3, 3, ... epochs within the round),
     one momentum SGD (0.9) over backbone, classifier and personal head, new each round, minimising
       L = L_cos (CosFace over the n_k + public rows: the run's margin head, model.head=cosface s=30 m=0.4)
         + 10 L_bce (the personal head, models/personal_head.py)
         + μ L_con (the model-contrastive term against frozen Θ and the party's previous backbone, μ = 5, τ = 0.5);
  4. the upload θ_k, weighted at the server by the combined set's size |D_k ∪ H_k|.
The personal head, the private rows and the previous backbone stay on the party (its state, checkpointed).

The code's quirks are options, with the code's behaviour the default (spec §4.7): `public_rows` reset (the public
rows go back to the pretrained ones every round, as the code's server writes their average to a name the clients
never read) or keep (each party trains its own copy across rounds); the round-1 previous backbone `previous_start`
random (a freshly initialised network, the code), global (Θ) or none (no contrastive term in round 1)."""
from __future__ import annotations

from dataclasses import dataclass

from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.algorithms.method import Method
from fedmpi.algorithms.objective import LocalTraining
from fedmpi.errors import ConfigError

PREVIOUS_STARTS = ("random", "global", "none")
PUBLIC_ROWS = ("reset", "keep")


@dataclass
class FedFROptions:
    first_epochs: int = 10           # local epochs of round 1 (the code's --local_epoch 10)
    epoch_step: int = 2              # later rounds: E <- max(min_epochs, E - epoch_step) (--adaptive_local_epoch)
    min_epochs: int = 4
    first_decay: int = 8             # round 1: lr x lr_gamma every first_decay local epochs (train_decay); later
                                     # rounds every max(1, floor(3E/4))
    lr_gamma: float = 0.1
    threshold: float = 0.4           # hard negatives: best cosine to a local image strictly above it (HN_threshold)
    bce_weight: float = 10.0         # L = L_cos + bce_weight L_bce + mu L_con
    bce_scale: float = 30.0          # r
    bce_margin: float = 0.4          # m
    bce_lambda: float = 0.7          # lambda: the positive term's share
    bce_power: float = 3.0           # t of g(x) = 2((x + 1)/2)^t - 1
    mu: float = 5.0
    tau: float = 0.5
    previous_start: str = "random"   # random | global | none: the previous backbone of round 1
    public_rows: str = "reset"       # reset | keep: the public identities' classifier rows each round

    def validate(self, cfg) -> None:
        for key in ("first_epochs", "epoch_step", "min_epochs", "first_decay"):
            if getattr(self, key) < (0 if key == "epoch_step" else 1):
                raise ConfigError(f"fed.options.{key}: must be >= {0 if key == 'epoch_step' else 1}, got "
                                  f"{getattr(self, key)}")
        for key in ("bce_scale", "tau", "bce_power"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"fed.options.{key}: must be > 0, got {getattr(self, key)}")
        for key in ("bce_weight", "mu"):
            if getattr(self, key) < 0:
                raise ConfigError(f"fed.options.{key}: must be >= 0 (0: the term is left out), got {getattr(self, key)}")
        if not 0 < self.lr_gamma <= 1:
            raise ConfigError(f"fed.options.lr_gamma: must be in (0, 1], got {self.lr_gamma}")
        if not 0 <= self.bce_lambda <= 1:
            raise ConfigError(f"fed.options.bce_lambda: must be in [0, 1], got {self.bce_lambda}")
        if not -1 <= self.threshold <= 1:
            raise ConfigError(f"fed.options.threshold: a cosine, must be in [-1, 1], got {self.threshold}")
        if self.previous_start not in PREVIOUS_STARTS:
            raise ConfigError(f"fed.options.previous_start: {self.previous_start!r} is not one of "
                              f"{', '.join(PREVIOUS_STARTS)}")
        if self.public_rows not in PUBLIC_ROWS:
            raise ConfigError(f"fed.options.public_rows: {self.public_rows!r} is not one of {', '.join(PUBLIC_ROWS)}")
        if cfg.cross_device:
            raise ConfigError("fed.algorithm: fedfr trains each silo party's own objective over its identities and "
                              "the public ones; the cross-device clients have neither (clients.population=0)")
        if cfg.fv.enabled:
            raise ConfigError("fv.enabled: fedfr weighs the parties by their combined sets' sizes (spec §4.4); FV's "
                              "w would be a second answer")
        if cfg.run.cuda_graphs:
            raise ConfigError("run.cuda_graphs: fedfr's step runs the frozen global and previous backbones beside the "
                              "party's, which the captured graph does not hold")


class FedFRTraining(LocalTraining):
    """FedFR's local training: over the party's and the public identities, its own epochs, a fresh optimizer each
    round, the party weighed by its combined set; the global and previous backbones and the previous one's state
    on every trainer rank."""
    public_identities = True
    upload_columns = ("weight",)
    fresh_optimizer = True
    columns = ("hard_negatives", "combined_images", "local_epochs", "local_steps")
    kept_states = 3

    @staticmethod
    def objective(options, party):
        from fedmpi.algorithms.fedfr.objective import FedFRObjective

        return FedFRObjective(options, party)


# the clients' SGD: momentum 0.9, weight decay optim.weight_decay
FedFR = Method("fedfr", "FedFR", "#8c6d31", FedFROptions, FedAvg, training=FedFRTraining, local_momentum_default=0.9)
