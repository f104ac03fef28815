"""Typed run configuration: dataclasses whose defaults are the paper's (FedFace Sec. 4.2), YAML files,
dotted command-line overrides, and validation that names the offending key path.

`load_config(path, overrides)` is the one entry point; `ConfigError` carries a one-line message.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from fedmpi.config.typed import typed_section
from fedmpi.config.yaml_numbers import load_yaml
from fedmpi.errors import ConfigError
from fedmpi.config.parties import DataConfig, DataSpec, PartyConfig, _three_parties  # noqa: F401
from fedmpi.config.sections import (BenchmarkSets, CheckpointConfig, EvalConfig, FVConfig, LogConfig,  # noqa: F401
                                    ModelConfig, OptimConfig, RunConfig, fv_runs)
from fedmpi.config.fed import FedConfig
from fedmpi.config.aggregation import sampling_rate
from fedmpi.config.clients import ClientsConfig
from fedmpi.config.legacy import migrate_legacy
from fedmpi.config.epochs import AUTO, with_derived_steps


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
    clients: ClientsConfig = field(default_factory=ClientsConfig)

    # ---- derived quantities (the schedule) ----
    @property
    def total_steps(self) -> int:
        return self.optim.epochs * self.optim.steps_per_epoch

    @property
    def cross_device(self) -> bool:
        return self.clients.population > 0

    @property
    def planned_rounds(self) -> int:
        return self.clients.rounds if self.cross_device else self.total_steps // self.fed.K

    @property
    def sampling_rate(self) -> float:
        """q of the privacy accountant: the share of the clients sampled each round (1 for the silo parties)."""
        return sampling_rate(self)

    @property
    def rounds(self) -> int:
        """The rounds a run makes: the planned ones, or fewer where fed.dp.target_epsilon would be passed."""
        return self.fed.dp.rounds_within(self.planned_rounds, self.sampling_rate)

    def lr_at_round(self, r: int) -> float:
        """eta_r for round r (0-based); constant within a round since milestones fall on round boundaries.
        Cross-device clients use a constant lr (Hsu et al.: no decay)."""
        if self.cross_device:
            return self.optim.lr
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
    "fed.setting": ("federated", "centralized", "solo"),
    "fed.weighting": ("uniform", "batch"),
    "fed.upload_check.action": ("off", "warn", "exclude", "stop"),
    "fed.secure_aggregation.mode": ("off", "secagg", "secagg+"),
    "fv.norm": ("local", "moving"),
    "fv.folds": ("first", "second"),
    "fv.placement": ("server", "dedicated"),
    "run.device": ("auto", "cpu", "cuda"),
    "run.dtype": ("float32", "float64"),
    "clients.dataset": ("synthetic", "cifar10", "faces"),
    "clients.cohort": ("sequential", "vectorised", "auto"),
    "data.val_kind": ("synthetic", "bin"),
    "parties.data.kind": ("synthetic", "rec", "folder"),
    # public: data.public's synthetic identities as a party's own (the public stage, configs/public_pretrain.yaml)
    "parties.data.style": ("ms1m", "ga", "vgg", "public"),
}


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def to_yaml(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


# ------------------------------------------------------------------ overrides


def _parse_value(text: str):
    try:
        return load_yaml(text)
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
    if parts == ["parties"] and isinstance(value, list):   # a later parties.NAME.attack.scale=... finds its section
        value = [_party_with_defaults(p, f"parties[{i}]") for i, p in enumerate(value)]
    node[parts[-1]] = value


# ------------------------------------------------------------------ validation


def validate(cfg: Config) -> Config:
    """Choices first, then each section's own checks (beside its fields); the first problem is raised. The checks
    change nothing: the checked config comes back as a new one, with what it left empty decided (fed's and log's
    sections resolved): what every rank runs and the log keeps."""
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
        value = flat
        for part in path.split("."):
            value = value[part]
        if value not in allowed:
            fail(path, f"{value!r} is not one of {', '.join(allowed)}")
    if not cfg.parties:
        fail("parties", "at least one party is needed")
    for i, party in enumerate(cfg.parties):
        party.validate(cfg, fail, i)
    fed = cfg.fed.validate(cfg, fail)            # resolved: the rule's defaults, the paper's local momentum
    for section in (cfg.optim, cfg.data, cfg.model, cfg.fv, cfg.eval, cfg.checkpoint, cfg.run, cfg.clients):
        section.validate(cfg, fail)
    log = cfg.log.validate(cfg, fail)            # resolved: TensorBoard where it is installed
    if math.isnan(cfg.optim.lr):
        fail("optim.lr", "is NaN")
    return dataclasses.replace(cfg, fed=fed, log=log)


# ------------------------------------------------------------------ entry point


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = (),
                sizes=None) -> Config:
    """Defaults <- YAML file (if any) <- dotted overrides; then type-check and validate. `sizes(cfg)` gives the
    parties' {name: (images, images per step)} for `optim.steps_per_epoch: auto` (fedmpi/party_sizes.py:
    the launch and fedmpi.layout pass it; the config reads no data itself)."""
    data = to_dict(Config())
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"--config: no such file {path}")
        try:
            loaded = load_yaml(path.read_text(encoding="utf-8")) or {}
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
    cfg = typed_section(Config, migrate_legacy(data))
    if cfg.optim.steps_per_epoch == AUTO:
        cfg = with_derived_steps(cfg, sizes, validate)
    return validate(cfg)


def config_from_yaml(text: str, where: str = "config") -> Config:
    """A config saved as YAML text (the run log's /config, a checkpoint's config), validated like a file."""
    try:
        loaded = load_yaml(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{where}: the top level must be a mapping")
    return validate(typed_section(Config, migrate_legacy(_merge(to_dict(Config()), loaded, ""))))


def _merge(base: dict, new: dict, path: str) -> dict:
    out = dict(base)
    for key, value in new.items():
        where = f"{path}.{key}" if path else key
        if key == "parties" and isinstance(value, list):
            out[key] = [_party_with_defaults(p, f"parties[{i}]") for i, p in enumerate(value)]
        elif key in base and isinstance(base[key], dict) and isinstance(value, dict):
            out[key] = _merge(base[key], value, where)
        else:
            out[key] = value  # unknown keys are refused by typed_section with their path
    return out


def _party_with_defaults(p, where: str) -> dict:
    if not isinstance(p, dict):
        raise ConfigError(f"{where}: expected a mapping with name, ranks, data")
    base = to_dict(PartyConfig())
    return _merge(base, p, where)
