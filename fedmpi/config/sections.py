"""The sections of the run configuration (fedmpi.config.Config): dataclasses whose defaults are the paper's
(FedFace Sec. 4.2), each with the validation of its own fields beside them (`validate(cfg, fail)`; `fail(path,
message)` raises the ConfigError). fedmpi.config builds them from YAML and overrides; import them from there.
This file: data, model, optimizer, FV, evaluation, log, checkpoint, run; the rule's sections (fed, fed.server,
fed.options) are in fed.py, the cross-device clients in clients.py."""
from __future__ import annotations

import dataclasses
import importlib.util
import math
from dataclasses import dataclass, field


@dataclass
class DataSpec:
    """Where one party's training images come from."""
    kind: str = "synthetic"          # synthetic | rec | folder
    path: str = ""                   # rec: folder with train.rec/train.idx; folder: one sub-folder per identity
    style: str = "ms1m"              # synthetic: the party's prior (ms1m | ga | vgg)
    identities: int = 500            # synthetic only
    images_per_identity: int = 20    # synthetic only
    split_index: int = 0             # 12-party setting: part split_index of split_count, by identity
    split_count: int = 1
    shuffle_labels: bool = False     # permute the labels over the images (useless data; FV behaviour tests)
    dirichlet_clients: int = 0       # > 0: this party is one client of a Dirichlet partition (Hsu et al.) ...
    dirichlet_client: int = 0        # ... of the dataset into this many clients: client index
    dirichlet_alpha: float = 1.0     # concentration; 0 = one class per client
    dirichlet_seed: int = 0

    def validate(self, fail, where: str) -> None:
        if self.kind == "synthetic":
            if self.identities <= 0:
                fail(f"{where}.identities", f"an empty party: must be > 0, got {self.identities}")
            if self.images_per_identity <= 0:
                fail(f"{where}.images_per_identity", f"an empty party: must be > 0, got {self.images_per_identity}")
        elif not self.path:
            fail(f"{where}.path", f"kind {self.kind} needs a path")
        if self.split_count <= 0 or not 0 <= self.split_index < self.split_count:
            fail(f"{where}.split_index", f"must be in 0..split_count-1 (split_count={self.split_count})")
        if self.dirichlet_clients < 0 or (self.dirichlet_clients
                                          and not 0 <= self.dirichlet_client < self.dirichlet_clients):
            fail(f"{where}.dirichlet_client", f"must be in 0..dirichlet_clients-1 "
                                              f"(dirichlet_clients={self.dirichlet_clients})")
        if self.dirichlet_alpha < 0:
            fail(f"{where}.dirichlet_alpha", f"must be >= 0, got {self.dirichlet_alpha}")
        if self.kind == "synthetic" and self.identities < self.split_count:
            fail(f"{where}.identities", f"an empty party: {self.identities} identities cannot be split "
                                        f"into {self.split_count} parts")


@dataclass
class AttackSpec:
    """What a bad party does to its upload, for robustness studies: the trainable values of θ_i are sent as
    Θ + scale·(θ_i − Θ) (Θ the round's global model; frozen values and BN statistics are sent as trained).
    1 is honest, -1 a sign-flipped update, 10 an update scaled up, 0 a free rider sending Θ back."""
    scale: float = 1.0

    def validate(self, fail, where: str) -> None:
        if not math.isfinite(self.scale):
            fail(f"{where}.scale", f"must be a finite number, got {self.scale}")


@dataclass
class PartyConfig:
    name: str = ""
    ranks: int = 1
    data: DataSpec = field(default_factory=DataSpec)
    attack: AttackSpec = field(default_factory=AttackSpec)
    batch_size: int | None = None    # images per rank and step; empty: optim.batch_size

    def validate(self, cfg: "Config", fail, i: int) -> None:
        where = f"parties.{self.name or i}"
        if not self.name:
            fail(f"parties[{i}].name", "every party needs a name")
        if [p.name for p in cfg.parties].count(self.name) > 1:
            fail(f"{where}.name", "party names must be unique")
        if self.ranks <= 0:
            fail(f"{where}.ranks", f"must be > 0, got {self.ranks}")
        if self.batch_size is not None and self.batch_size <= 0:
            fail(f"{where}.batch_size", f"must be > 0 (or empty: optim.batch_size), got {self.batch_size}")
        per_rank = self.batch_size or cfg.optim.batch_size
        if cfg.model.bn_batch and per_rank % cfg.model.bn_batch:
            fail(f"{where}.batch_size" if self.batch_size else "model.bn_batch",
                 f"party {self.name}'s {per_rank} images per rank are not a multiple of model.bn_batch="
                 f"{cfg.model.bn_batch}")
        self.data.validate(fail, f"{where}.data")
        self.attack.validate(fail, f"{where}.attack")
        if self.attack.scale != 1.0 and (cfg.fed.setting == "centralized" or cfg.cross_device):
            fail(f"{where}.attack.scale", "only a party of the federated (or solo) layout uploads; "
                                          f"fed.setting={cfg.fed.setting}"
                                          f"{' with cross-device clients' if cfg.cross_device else ''} has none")


def _three_parties() -> list[PartyConfig]:
    return [PartyConfig("ms1m", 8, DataSpec(style="ms1m")),
            PartyConfig("ga", 4, DataSpec(style="ga")),
            PartyConfig("vgg", 4, DataSpec(style="vgg"))]


@dataclass
class DataConfig:
    root: str = "data"               # synthetic sets are generated here
    image_size: int = 112
    workers: int | None = None       # DataLoader workers per trainer rank; empty: 2 on a GPU, 0 on CPU
    seed: int = 0
    skip_bad: bool = False
    val_sets: list[str] = field(default_factory=lambda: ["lfw", "cfp_fp", "agedb_30", "calfw", "cplfw"])
    val_kind: str = "synthetic"      # synthetic | bin
    val_path: str = ""
    val_pairs_per_fold: int = 100

    def loader_workers(self, device) -> int:
        """DataLoader workers for a rank on `device`. Each worker is a forked copy of its rank (on CPU about
        660 MB of anonymous memory once Python's reference counts have touched the pages), which a CPU rank's
        decoding does not repay (`data.workers=0` there); a GPU rank keeps 2, so decoding overlaps its steps."""
        if self.workers is not None:
            return self.workers
        return 2 if getattr(device, "type", device) == "cuda" else 0

    def validate(self, cfg: "Config", fail) -> None:
        if not self.image_size > 0:
            fail("data.image_size", f"must be > 0, got {self.image_size}")
        if self.image_size % 16:
            fail("data.image_size", f"must be a multiple of 16 (the backbone downsamples by 16), got {self.image_size}")
        if self.workers is not None and self.workers < 0:
            fail("data.workers", f"must be >= 0 (or empty: 2 on a GPU, 0 on CPU), got {self.workers}")
        if self.val_pairs_per_fold <= 0:
            fail("data.val_pairs_per_fold", f"must be > 0, got {self.val_pairs_per_fold}")


@dataclass
class ModelConfig:
    backbone: str = "ir18"           # ir18 | ir34 | ir50 | ir100
    embedding_size: int = 512
    width: float = 1.0               # channel multiplier (small CPU runs)
    dropout: float = 0.0
    head: str = "arcface"            # arcface | cosface
    scale: float = 64.0
    margin: float | None = None      # None: 0.5 for ArcFace, 0.35 for CosFace
    classifier: str = "auto"         # auto | replicated | sharded
    sample_rate: float = 1.0         # partial-FC negative sampling
    bn_batch: int = 0                # images a BatchNorm layer normalises together in training (0: a rank's
                                     # whole batch); a run that may resume on other rank counts sets it to its
                                     # smallest batch per rank, so its statistics do not depend on the layout

    def validate(self, cfg: "Config", fail) -> None:
        for key in ("embedding_size", "width", "scale"):
            if not getattr(self, key) > 0:
                fail(f"model.{key}", f"must be > 0, got {getattr(self, key)}")
        if not 0 < self.sample_rate <= 1:
            fail("model.sample_rate", f"must be in (0, 1], got {self.sample_rate}")
        if self.bn_batch < 0:
            fail("model.bn_batch", f"must be >= 0 (0: a rank's whole batch), got {self.bn_batch}")


@dataclass
class OptimConfig:
    lr: float = 0.1
    momentum: float = 0.9            # beta: classifier (eq. 1-2), PFM's global momentum (eq. 3, 6)
    weight_decay: float = 5e-4
    batch_size: int = 64             # per trainer rank
    epochs: int = 26
    steps_per_epoch: int = 12800
    milestones: list[int] = field(default_factory=lambda: [10, 18, 24])  # epochs; lr x gamma at each
    gamma: float = 0.1
    amp: str = "none"                # none | bf16 | fp16 (GPU runs)

    def validate(self, cfg: "Config", fail) -> None:
        for key in ("lr", "batch_size", "epochs", "steps_per_epoch"):
            if not getattr(self, key) > 0:
                fail(f"optim.{key}", f"must be > 0, got {getattr(self, key)}")
        if not 0 <= self.momentum < 1:
            fail("optim.momentum", f"must be in [0, 1), got {self.momentum}")
        if self.weight_decay < 0:
            fail("optim.weight_decay", f"must be >= 0, got {self.weight_decay}")
        K = cfg.fed.K
        if K > 0 and cfg.total_steps % K:
            fail("fed.K", f"epochs x steps_per_epoch = {cfg.total_steps} is not a whole number of rounds of K={K}")
        for i, m in enumerate(self.milestones):
            if not 0 < m <= self.epochs:
                fail(f"optim.milestones[{i}]", f"epoch {m} is outside 1..{self.epochs}")
            step = m * self.steps_per_epoch
            if K > 0 and step % K:
                fail(f"optim.milestones[{i}]", f"epoch {m} ends at step {step}, not on a round boundary of K={K} "
                                               "(the learning rate must be constant within a round)")
        if sorted(self.milestones) != list(self.milestones):
            fail("optim.milestones", "must be increasing")


@dataclass
class FVConfig:
    enabled: bool = False
    T: int = 3
    phi: float = 0.01
    gamma: float = 0.01
    eps: float = 0.001
    norm: str = "local"              # local | moving
    folds: str = "first"             # first | second: which 5 folds FV uses; evaluation uses the others
    placement: str = "server"        # server | dedicated
    validators: int = 1              # dedicated validator ranks
    iterations_per_round: int = 0    # > 0: deterministic mode, exactly this many FV iterations per round
    pairs_per_set: int = 0           # 0: a candidate is scored on every pair of a set's FV folds (the paper); N >= 10:
                                     # on a fixed subset of N of them (fv/pair_subset.py); evaluation keeps all its pairs

    def validate(self, cfg: "Config", fail) -> None:
        if fv_runs(cfg) and cfg.fed.setting != "federated":
            fail("fv.enabled", f"FV searches weightings over parties; fed.setting={cfg.fed.setting} has a single party")
        for key in ("T", "validators"):
            if getattr(self, key) <= 0:
                fail(f"fv.{key}", f"must be > 0, got {getattr(self, key)}")
        for key in ("phi", "gamma"):
            if not 0 <= getattr(self, key) <= 1:
                fail(f"fv.{key}", f"must be in [0, 1], got {getattr(self, key)}")
        if self.eps <= 0:
            fail("fv.eps", f"must be > 0, got {self.eps}")
        if self.iterations_per_round < 0:
            fail("fv.iterations_per_round", f"must be >= 0, got {self.iterations_per_round}")
        if self.pairs_per_set != 0 and self.pairs_per_set < 10:
            fail("fv.pairs_per_set", f"must be 0 (every FV pair) or >= 10 (two pairs per FV fold), got "
                                     f"{self.pairs_per_set}")


def fv_runs(cfg) -> bool:
    """Whether a run does Federated Validation: the one place that reads fv.enabled (the config refuses it
    for the cross-device setting and for a single party)."""
    return cfg.fv.enabled


@dataclass
class BenchmarkSets:
    """Large-scale benchmarks evaluated with the pair sets (fedmpi.silo.benchmarks): a release root, or
    'synthetic' for the synthetic release in the same layout; empty: not evaluated."""
    ijbb: str = ""                   # IJB-B root (meta/, loose_crop/)
    ijbc: str = ""                   # IJB-C root
    megaface: str = ""               # MegaFace test pack root (facescrub_lst, megaface_lst, ...)

    def validate(self, cfg: "Config", fail) -> None:
        for name, root in dataclasses.asdict(self).items():
            if root and cfg.eval.every == 0:
                fail(f"eval.sets.{name}", "is evaluated with the held-out evaluation; eval.every=0 means no "
                     "evaluation (set eval.every > 0)")


@dataclass
class EvalConfig:
    every: int = 0                   # evaluate the global model every N rounds and after the last (0: never)
    batch_size: int = 128
    sets: BenchmarkSets = field(default_factory=BenchmarkSets)

    def validate(self, cfg: "Config", fail) -> None:
        if self.every < 0:
            fail("eval.every", f"must be >= 0 (0: no evaluation), got {self.every}")
        self.sets.validate(cfg, fail)


@dataclass
class LogConfig:
    dir: str = "runs"
    name: str = ""                   # run folder under dir; empty: <method key>-<timestamp> (pfm-..., centralized-...)
    influence: bool = False          # log each party's effective weight in every round's combination (`influence`)
    tensorboard: bool | None = None  # TensorBoard event files beside log.h5 as the run goes; empty: on when the
                                     # tensorboard package is installed (fedmpi/store/tensorboard.py)

    def validate(self, cfg: "Config", fail) -> None:
        installed = importlib.util.find_spec("tensorboard") is not None   # looked up, not imported
        if self.tensorboard is None:
            self.tensorboard = installed
        elif self.tensorboard and not installed:
            fail("log.tensorboard", "the tensorboard package is not installed (pip install tensorboard)")
        if self.influence and cfg.cross_device:
            fail("log.influence", "needs every upload; the cross-device clients' uploads are summed on the "
                                  "trainer ranks")


@dataclass
class CheckpointConfig:
    every: int = 0                   # checkpoint every N rounds and after the last (0: only when preempted)
    keep: int = 2                    # complete checkpoints kept (older ones are pruned)
    dir: str = ""                    # empty: <run folder>/ckpt

    def validate(self, cfg: "Config", fail) -> None:
        if self.every < 0:
            fail("checkpoint.every", f"must be >= 0 (0: only when preempted), got {self.every}")
        if self.keep < 1:
            fail("checkpoint.keep", f"must be >= 1, got {self.keep}")


@dataclass
class RunConfig:
    seed: int = 0
    device: str = "auto"             # auto | cpu | cuda
    dtype: str = "float32"           # float32 | float64 (float64 for equivalence tests)
    deterministic: bool = False
    save_final: str = ""             # write the final global backbone (flat, .pt) here
    collective_timeout_s: float = 600.0
    share_node_memory: bool = True   # CPU: a party's ranks on a node hold one copy of Θ and PFM's M (MPI-3 memory)
    memory_check: bool = True        # refuse at launch, in one line, a layout whose estimated peak does not fit its
                                     # nodes' (GPUs') memory, naming the override that fits (fedmpi/memory)

    def validate(self, cfg: "Config", fail) -> None:
        if not self.collective_timeout_s >= 10:
            fail("run.collective_timeout_s", f"must be >= 10 s (a collective that times out aborts the run), "
                                             f"got {self.collective_timeout_s}")
