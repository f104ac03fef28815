"""The sections of the run configuration (fedmpi.config.Config): dataclasses whose defaults are the paper's (FedFace
Sec. 4.2), each with the validation of its own fields beside them (`validate(cfg, fail)`; `fail(path, message)`
raises the ConfigError). fedmpi.config builds them from YAML and overrides; import them from there. This file:
model, optimizer, FV, evaluation, log, checkpoint, run; the parties and their data are in parties.py, the rule's
sections (fed, fed.server, fed.options) in fed.py, the cross-device clients in clients.py."""
from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass, field


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
    init: str = ""                   # a pretrained start: an insightface-layout IResNet state_dict (.pth, what
                                     # tools.export writes), checked key by key against this backbone
    init_classifier: str = ""        # the public identities' classifier (tools.export --classifier layout), for a
                                     # rule that trains over data.public's identities too (fedfr)

    def validate(self, cfg: "Config", fail) -> None:
        from fedmpi.config.rules import algorithm_method

        for key in ("embedding_size", "width", "scale"):
            if not getattr(self, key) > 0:
                fail(f"model.{key}", f"must be > 0, got {getattr(self, key)}")
        if self.init and cfg.cross_device and not cfg.clients.face_clients:
            fail("model.init", f"starts an IResNet; the cross-device clients of clients.dataset="
                              f"{cfg.clients.dataset} train a CIFAR CNN (clients.dataset=faces: an IResNet)")
        if self.init_classifier:
            if not algorithm_method(cfg).training.public_identities:
                fail("model.init_classifier", f"holds the public identities' rows, which only a rule training over "
                                              f"them reads (fedfr); fed.algorithm={cfg.fed.algorithm} does not")
            if not cfg.data.public.kind:
                fail("model.init_classifier", "holds the public identities' rows: data.public must name them")
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
    steps_per_epoch: int | str = 12800   # or auto: the longest party's epoch in steps, rounded up to rounds of
                                     # fed.K (config/epochs.py); the run says the plan at its start
    milestones: list[int] = field(default_factory=lambda: [10, 18, 24])  # epochs; lr x gamma at each
    gamma: float = 0.1
    amp: str = "none"                # none | bf16 | fp16 (GPU runs)
    amp_batchnorm: str = "amp"       # amp | fp32: BatchNorm in autocast's dtype, or in float32 (cuDNN's kernels,
                                     # which take no bfloat16 input)
    fused: bool | None = None        # the classifier's momentum SGD as one fused kernel; empty: on with CUDA

    def validate(self, cfg: "Config", fail) -> None:
        if isinstance(self.steps_per_epoch, str):
            fail("optim.steps_per_epoch", f"must be a number of steps or auto, got {self.steps_per_epoch!r}")
        for key in ("lr", "batch_size", "epochs", "steps_per_epoch"):
            if not getattr(self, key) > 0:
                fail(f"optim.{key}", f"must be > 0, got {getattr(self, key)}")
        if self.amp_batchnorm not in ("amp", "fp32"):
            fail("optim.amp_batchnorm", f"must be amp or fp32, got {self.amp_batchnorm!r}")
        if self.amp_batchnorm == "fp32" and self.amp == "none":
            fail("optim.amp_batchnorm", "fp32 keeps BatchNorm out of autocast, but optim.amp is none (no autocast)")
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
    """Large-scale benchmarks evaluated with the pair sets (fedmpi.evaluation.benchmarks): a release root, or
    'synthetic' for the synthetic release in the same layout; empty: not evaluated."""
    ijbb: str = ""                   # IJB-B root (meta/, loose_crop/)
    ijbc: str = ""                   # IJB-C root
    megaface: str = ""               # MegaFace test pack root (facescrub_lst, megaface_lst, ...)

    def validate(self, cfg: "Config", fail) -> None:
        for name, root in dataclasses.asdict(self).items():
            if root and cfg.eval.every == 0:
                fail(f"eval.sets.{name}", "is evaluated with the held-out evaluation; eval.every=0 means no "
                     "evaluation (set eval.every > 0)")
            if root and cfg.cross_device and not cfg.clients.face_clients:
                fail(f"eval.sets.{name}", f"evaluates face embeddings; the cross-device clients of clients.dataset="
                                          f"{cfg.clients.dataset} train a CIFAR CNN (clients.dataset=faces: an IResNet)")


@dataclass
class EvalConfig:
    every: int = 0                   # evaluate the global model every N rounds and after the last (0: never)
    batch_size: int = 128
    sets: BenchmarkSets = field(default_factory=BenchmarkSets)
    # the personalised evaluation (with data.heldout > 0): each party's model after its local training on its own
    # identities, 1:1 TAR and 1:N TPIR at these false accept rates (fedmpi/metrics/personal.py)
    personal_fars: list[float] = field(default_factory=lambda: [1e-3, 1e-2, 1e-1])

    def validate(self, cfg: "Config", fail) -> None:
        if self.every < 0:
            fail("eval.every", f"must be >= 0 (0: no evaluation), got {self.every}")
        for i, far in enumerate(self.personal_fars):
            if not 0 < far < 1:
                fail(f"eval.personal_fars[{i}]", f"must be in (0, 1), got {far}")
        self.sets.validate(cfg, fail)


@dataclass
class LogConfig:
    dir: str = "runs"
    name: str = ""                   # run folder under dir; empty: <method key>-<timestamp> (pfm-..., centralized-...)
    influence: bool = False          # log each party's effective weight in every round's combination (`influence`)
    tensorboard: bool | None = None  # TensorBoard event files beside log.h5 as the run goes; empty: on when the
                                     # tensorboard package is installed (fedmpi/store/tensorboard.py)
    # rounds (from 1) whose received uploads the server writes to received/round-R.h5 for a privacy audit
    # (fedmpi/core/received.py); across devices every upload of the run is then sent, not summed on the way,
    # and the server's upload check sees each client's (docs/PRIVACY_AUDIT.md)
    record_received: list[int] = field(default_factory=list)

    def validate(self, cfg: "Config", fail) -> "LogConfig":
        """Check the section; returns it resolved, as a new object: log.tensorboard decided where it is empty."""
        installed = tensorboard_installed()
        if self.tensorboard and not installed:
            fail("log.tensorboard", "the tensorboard package is not installed (pip install tensorboard)")
        for i, r in enumerate(self.record_received):
            if not 1 <= r <= cfg.planned_rounds:
                fail(f"log.record_received[{i}]", f"must be a round from 1 to {cfg.planned_rounds}, got {r}")
        if self.influence and cfg.cross_device:
            fail("log.influence", "needs every upload; the cross-device clients' uploads are summed on the "
                                  "trainer ranks")
        return dataclasses.replace(self, tensorboard=installed if self.tensorboard is None else self.tensorboard)


def tensorboard_installed() -> bool:
    return importlib.util.find_spec("tensorboard") is not None   # looked up, not imported


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
    # the silo trainer's step on a GPU (fedmpi/models/speed.py, docs/GPU.md: what each measured)
    channels_last: bool | None = None  # NHWC; empty: on with CUDA (silo), on CPU (clients one by one, core/build.py)
    compile: str = "off"             # off | default | max-autotune: torch.compile of the backbone (and the head of a
                                     # one-rank party)
    compile_cache: str = ""          # TorchInductor's cache; empty: <run folder>/compile_cache (a requeue reuses it)
    cuda_graphs: bool = False        # the step's GPU work replayed as CUDA graphs (one batch shape; CUDA only)
    ddp_bucket_mb: float = 25.0      # a multi-GPU party's gradient buckets (DistributedDataParallel's bucket_cap_mb)
    ddp_compression: str = "none"    # none | fp16 | bf16: a multi-rank party's gradient all-reduce in 16 bits

    def validate(self, cfg: "Config", fail) -> None:
        if not self.collective_timeout_s >= 10:
            fail("run.collective_timeout_s", f"must be >= 10 s (a collective that times out aborts the run), "
                                             f"got {self.collective_timeout_s}")
        for key, choices in (("compile", ("off", "default", "max-autotune")), ("ddp_compression", ("none", "fp16", "bf16"))):
            if getattr(self, key) not in choices:
                fail(f"run.{key}", f"must be one of {', '.join(choices)}, got {getattr(self, key)!r}")
        if not self.ddp_bucket_mb > 0:
            fail("run.ddp_bucket_mb", f"must be > 0, got {self.ddp_bucket_mb}")
        if self.cuda_graphs and self.device == "cpu":
            fail("run.cuda_graphs", "CUDA graphs need a GPU, but run.device is cpu")
        if cfg.clients.population > 0:
            for key, off in (("compile", "off"), ("cuda_graphs", False)):
                if getattr(self, key) != off:
                    fail(f"run.{key}", f"applies to the silo parties' trainer; the cross-device clients' step "
                                       f"(clients.population > 0) takes run.{key}={str(off).lower()}")
