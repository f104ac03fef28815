"""Typed run configuration: dataclasses whose defaults are the paper's (FedFace Sec. 4.2), YAML files,
dotted command-line overrides, and validation that names the offending key path.

`load_config(path, overrides)` is the one entry point; `ConfigError` carries a one-line message.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml


class ConfigError(ValueError):
    """A configuration problem; the message names the key path."""


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


@dataclass
class PartyConfig:
    name: str = ""
    ranks: int = 1
    data: DataSpec = field(default_factory=DataSpec)


def _three_parties() -> list[PartyConfig]:
    return [PartyConfig("ms1m", 8, DataSpec(style="ms1m")),
            PartyConfig("ga", 4, DataSpec(style="ga")),
            PartyConfig("vgg", 4, DataSpec(style="vgg"))]


@dataclass
class DataConfig:
    root: str = "data"               # synthetic sets are generated here
    image_size: int = 112
    workers: int = 2                 # DataLoader workers per trainer rank
    seed: int = 0
    skip_bad: bool = False
    val_sets: list[str] = field(default_factory=lambda: ["lfw", "cfp_fp", "agedb_30", "calfw", "cplfw"])
    val_kind: str = "synthetic"      # synthetic | bin
    val_path: str = ""
    val_pairs_per_fold: int = 100


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


@dataclass
class FedConfig:
    algorithm: str = "pfm"           # pfm | fedavg | fedavgm | centralized | solo
    K: int = 100                     # local steps per round
    weighting: str = "uniform"       # initial w: uniform | batch (proportional to party batch size)
    local_momentum: float = 0.9      # backbone momentum of local SGD for fedavg/fedavgm/centralized/solo
    server_momentum: float = 0.9     # FedAvgM beta
    server_lr: float = 1.0           # FedAvgM eta_s
    nesterov: bool = True            # FedAvgM
    solo_party: str = ""             # solo: which party trains alone


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


@dataclass
class BenchmarkSets:
    """Large-scale benchmarks evaluated with the pair sets (fedmpi.roles.benchmarks): a release root, or
    'synthetic' for the synthetic release in the same layout; empty: not evaluated."""
    ijbb: str = ""                   # IJB-B root (meta/, loose_crop/)
    ijbc: str = ""                   # IJB-C root
    megaface: str = ""               # MegaFace test pack root (facescrub_lst, megaface_lst, ...)


@dataclass
class EvalConfig:
    every: int = 0                   # evaluate the global model every N rounds (0: only at the end)
    batch_size: int = 128
    sets: BenchmarkSets = field(default_factory=BenchmarkSets)


@dataclass
class LogConfig:
    dir: str = "runs"
    name: str = ""                   # run folder under dir; empty: <algorithm>-<timestamp>


@dataclass
class CheckpointConfig:
    every: int = 0                   # checkpoint every N rounds and after the last (0: only when preempted)
    keep: int = 2                    # complete checkpoints kept (older ones are pruned)
    dir: str = ""                    # empty: <run folder>/ckpt


@dataclass
class RunConfig:
    seed: int = 0
    device: str = "auto"             # auto | cpu | cuda
    dtype: str = "float32"           # float32 | float64 (float64 for equivalence tests)
    deterministic: bool = False
    save_final: str = ""             # write the final global backbone (flat, .pt) here
    collective_timeout_s: float = 600.0


@dataclass
class Config:
    parties: list[PartyConfig] = field(default_factory=_three_parties)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    fed: FedConfig = field(default_factory=FedConfig)
    fv: FVConfig = field(default_factory=FVConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    log: LogConfig = field(default_factory=LogConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    run: RunConfig = field(default_factory=RunConfig)

    # ---- derived quantities (the schedule) ----
    @property
    def total_steps(self) -> int:
        return self.optim.epochs * self.optim.steps_per_epoch

    @property
    def rounds(self) -> int:
        return self.total_steps // self.fed.K

    def lr_at_round(self, r: int) -> float:
        """eta_r for round r (0-based); constant within a round since milestones fall on round boundaries."""
        step = r * self.fed.K
        drops = sum(1 for m in self.optim.milestones if step >= m * self.optim.steps_per_epoch)
        return self.optim.lr * self.optim.gamma ** drops

    @property
    def margin(self) -> float:
        if self.model.margin is not None:
            return self.model.margin
        return 0.5 if self.model.head == "arcface" else 0.35


CHOICES = {
    "model.backbone": ("ir18", "ir34", "ir50", "ir100"),
    "model.head": ("arcface", "cosface"),
    "model.classifier": ("auto", "replicated", "sharded"),
    "optim.amp": ("none", "bf16", "fp16"),
    "fed.algorithm": ("pfm", "fedavg", "fedavgm", "centralized", "solo"),
    "fed.weighting": ("uniform", "batch"),
    "fv.norm": ("local", "moving"),
    "fv.folds": ("first", "second"),
    "fv.placement": ("server", "dedicated"),
    "run.device": ("auto", "cpu", "cuda"),
    "run.dtype": ("float32", "float64"),
    "data.val_kind": ("synthetic", "bin"),
    "parties.data.kind": ("synthetic", "rec", "folder"),
    "parties.data.style": ("ms1m", "ga", "vgg"),
}


# ------------------------------------------------------------------ building from plain data


def _strip_optional(tp):
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], True
    return tp, False


def _coerce(value, tp, path: str):
    tp, optional = _strip_optional(tp)
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{path}: must not be empty")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {type(value).__name__}")
        return _build(tp, value, path)
    origin = typing.get_origin(tp)
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{path}: expected a list, got {type(value).__name__} {value!r}")
        return [_coerce(v, item_tp, f"{path}[{i}]") for i, v in enumerate(value)]
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{path}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{path}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{path}: expected a string, got {value!r}")
    raise ConfigError(f"{path}: unsupported type {tp}")


def _build(cls, data: dict, path: str = ""):
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            where = f"{path}.{key}" if path else key
            raise ConfigError(f"{where}: unknown key (known: {', '.join(sorted(names))})")
    kwargs = {k: _coerce(v, hints[k], f"{path}.{k}" if path else k) for k, v in data.items()}
    return cls(**kwargs)


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def to_yaml(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


# ------------------------------------------------------------------ overrides


def _parse_value(text: str):
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_override(data: dict, item: str) -> None:
    """Apply `a.b.c=value` to a nested plain dict. Party entries are addressed by name: `parties.ga.ranks=2`."""
    if "=" not in item:
        raise ConfigError(f"{item}: an override must look like key.path=value")
    key, text = item.split("=", 1)
    value = _parse_value(text)
    parts = key.strip().split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        here = ".".join(parts[: i + 1])
        if isinstance(node, list):
            named = [p for p in node if isinstance(p, dict) and p.get("name") == part]
            if not named:
                names = [p.get("name") for p in node if isinstance(p, dict)]
                raise ConfigError(f"{here}: no party named {part!r} (parties: {', '.join(map(str, names))})")
            node = named[0]
        elif isinstance(node, dict):
            if part not in node or not isinstance(node[part], (dict, list)):
                raise ConfigError(f"{here}: unknown key")
            node = node[part]
        else:
            raise ConfigError(f"{here}: unknown key")
    if isinstance(node, list):
        raise ConfigError(f"{key}: address a party by name, e.g. parties.NAME.ranks=2")
    node[parts[-1]] = value


# ------------------------------------------------------------------ validation


def validate(cfg: Config) -> Config:
    def fail(path, msg):
        raise ConfigError(f"{path}: {msg}")

    flat = to_dict(cfg)
    for path, allowed in CHOICES.items():
        section, _, key = path.rpartition(".")
        if section.startswith("parties"):
            for p in cfg.parties:
                value = getattr(p.data, key)
                if value not in allowed and not (key == "style" and p.data.kind != "synthetic"):
                    fail(f"parties.{p.name}.data.{key}", f"{value!r} is not one of {', '.join(allowed)}")
            continue
        value = flat[section][key]
        if value not in allowed:
            fail(path, f"{value!r} is not one of {', '.join(allowed)}")

    if not cfg.parties:
        fail("parties", "at least one party is needed")
    names = [p.name for p in cfg.parties]
    for i, p in enumerate(cfg.parties):
        where = f"parties.{p.name or i}"
        if not p.name:
            fail(f"parties[{i}].name", "every party needs a name")
        if names.count(p.name) > 1:
            fail(f"{where}.name", "party names must be unique")
        if p.ranks <= 0:
            fail(f"{where}.ranks", f"must be > 0, got {p.ranks}")
        d = p.data
        if d.kind == "synthetic":
            if d.identities <= 0:
                fail(f"{where}.data.identities", f"an empty party: must be > 0, got {d.identities}")
            if d.images_per_identity <= 0:
                fail(f"{where}.data.images_per_identity", f"an empty party: must be > 0, got {d.images_per_identity}")
        elif not d.path:
            fail(f"{where}.data.path", f"kind {d.kind} needs a path")
        if d.split_count <= 0 or not 0 <= d.split_index < d.split_count:
            fail(f"{where}.data.split_index", f"must be in 0..split_count-1 (split_count={d.split_count})")
        if d.dirichlet_clients < 0 or (d.dirichlet_clients and not 0 <= d.dirichlet_client < d.dirichlet_clients):
            fail(f"{where}.data.dirichlet_client", f"must be in 0..dirichlet_clients-1 "
                                                   f"(dirichlet_clients={d.dirichlet_clients})")
        if d.dirichlet_alpha < 0:
            fail(f"{where}.data.dirichlet_alpha", f"must be >= 0, got {d.dirichlet_alpha}")
        if d.kind == "synthetic" and d.identities < d.split_count:
            fail(f"{where}.data.identities", f"an empty party: {d.identities} identities cannot be split "
                                             f"into {d.split_count} parts")

    o, f = cfg.optim, cfg.fed
    if f.K <= 0:
        fail("fed.K", f"must be > 0, got {f.K}")
    for path, value in (("optim.lr", o.lr), ("optim.batch_size", o.batch_size), ("optim.epochs", o.epochs),
                        ("optim.steps_per_epoch", o.steps_per_epoch), ("data.image_size", cfg.data.image_size),
                        ("model.embedding_size", cfg.model.embedding_size), ("model.width", cfg.model.width),
                        ("model.scale", cfg.model.scale), ("fed.server_lr", f.server_lr)):
        if not value > 0:
            fail(path, f"must be > 0, got {value}")
    for path, value in (("optim.momentum", o.momentum), ("fed.local_momentum", f.local_momentum),
                        ("fed.server_momentum", f.server_momentum)):
        if not 0 <= value < 1:
            fail(path, f"must be in [0, 1), got {value}")
    if o.weight_decay < 0:
        fail("optim.weight_decay", f"must be >= 0, got {o.weight_decay}")
    if not 0 < cfg.model.sample_rate <= 1:
        fail("model.sample_rate", f"must be in (0, 1], got {cfg.model.sample_rate}")
    if cfg.data.image_size % 16:
        fail("data.image_size", f"must be a multiple of 16 (the backbone downsamples by 16), got {cfg.data.image_size}")
    if cfg.data.workers < 0:
        fail("data.workers", f"must be >= 0, got {cfg.data.workers}")
    if cfg.total_steps % f.K:
        fail("fed.K", f"epochs x steps_per_epoch = {cfg.total_steps} is not a whole number of rounds of K={f.K}")
    for i, m in enumerate(o.milestones):
        if not 0 < m <= o.epochs:
            fail(f"optim.milestones[{i}]", f"epoch {m} is outside 1..{o.epochs}")
        step = m * o.steps_per_epoch
        if step % f.K:
            fail(f"optim.milestones[{i}]", f"epoch {m} ends at step {step}, not on a round boundary of K={f.K} "
                                           "(the learning rate must be constant within a round)")
    if sorted(o.milestones) != list(o.milestones):
        fail("optim.milestones", "must be increasing")
    if f.algorithm == "solo" and f.solo_party not in names:
        fail("fed.solo_party", f"{f.solo_party!r} is not a party (parties: {', '.join(names)})")
    if f.algorithm != "solo" and f.solo_party:
        fail("fed.solo_party", f"only used with fed.algorithm=solo, not {f.algorithm}")

    v = cfg.fv
    if v.enabled and f.algorithm not in ("fedavg", "pfm", "fedavgm"):
        fail("fv.enabled", f"FV searches weightings over parties; {f.algorithm} has a single party")
    if v.T <= 0:
        fail("fv.T", f"must be > 0, got {v.T}")
    for path, value in (("fv.phi", v.phi), ("fv.gamma", v.gamma)):
        if not 0 <= value <= 1:
            fail(path, f"must be in [0, 1], got {value}")
    if v.eps <= 0:
        fail("fv.eps", f"must be > 0, got {v.eps}")
    if v.validators <= 0:
        fail("fv.validators", f"must be > 0, got {v.validators}")
    if v.iterations_per_round < 0:
        fail("fv.iterations_per_round", f"must be >= 0, got {v.iterations_per_round}")
    if cfg.data.val_pairs_per_fold <= 0:
        fail("data.val_pairs_per_fold", f"must be > 0, got {cfg.data.val_pairs_per_fold}")
    if cfg.eval.every < 0:
        fail("eval.every", f"must be >= 0, got {cfg.eval.every}")
    if cfg.checkpoint.every < 0:
        fail("checkpoint.every", f"must be >= 0 (0: only when preempted), got {cfg.checkpoint.every}")
    if cfg.checkpoint.keep < 1:
        fail("checkpoint.keep", f"must be >= 1, got {cfg.checkpoint.keep}")
    if not cfg.run.collective_timeout_s >= 10:
        fail("run.collective_timeout_s", f"must be >= 10 s (a collective that times out aborts the run), "
                                         f"got {cfg.run.collective_timeout_s}")
    if math.isnan(o.lr):
        fail("optim.lr", "is NaN")
    return cfg


# ------------------------------------------------------------------ entry point


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Defaults <- YAML file (if any) <- dotted overrides; then type-check and validate."""
    data = to_dict(Config())
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"--config: no such file {path}")
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
                              "save the file as UTF-8") from None
        except OSError as exc:
            raise ConfigError(f"--config: cannot read {path} ({exc.strerror or exc})") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the top level must be a mapping")
        data = _merge(data, loaded, "")
    for item in overrides:
        apply_override(data, item)
    return validate(_build(Config, data))


def config_from_yaml(text: str, where: str = "config") -> Config:
    """A config saved as YAML text (the run log's /config, a checkpoint's config), validated like a file."""
    try:
        loaded = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{where}: the top level must be a mapping")
    return validate(_build(Config, _merge(to_dict(Config()), loaded, "")))


def _merge(base: dict, new: dict, path: str) -> dict:
    out = dict(base)
    for key, value in new.items():
        where = f"{path}.{key}" if path else key
        if key == "parties" and isinstance(value, list):
            out[key] = [_party_with_defaults(p, f"parties[{i}]") for i, p in enumerate(value)]
        elif key in base and isinstance(base[key], dict) and isinstance(value, dict):
            out[key] = _merge(base[key], value, where)
        else:
            out[key] = value  # unknown keys are refused by _build with their path
    return out


def _party_with_defaults(p, where: str) -> dict:
    if not isinstance(p, dict):
        raise ConfigError(f"{where}: expected a mapping with name, ranks, data")
    base = to_dict(PartyConfig())
    return _merge(base, p, where)
