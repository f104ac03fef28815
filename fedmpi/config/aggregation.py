"""The server's combination of the uploads: `fed.aggregation` (the rule of fedmpi/aggregation/registry.py and
its options, e.g. `rule: krum, f: 1`), `fed.dp` (central differential privacy, DP-FedAvg) and `fed.upload_check`
(what the server does with an upload out of range). They are checked against the layout here, so that a
federation that cannot satisfy a rule is refused before any rank starts."""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

from fedmpi.aggregation.registry import aggregator_class
from fedmpi.config.typed import typed_section
from fedmpi.config.clients import clients_per_round
from fedmpi.errors import ConfigError
from fedmpi.config.rules import algorithm_method
from fedmpi.config.sections import fv_runs


@dataclass
class UploadCheckConfig:
    """Each round's uploads looked at before they are used (fedmpi/aggregation/upload_check.py): an upload whose
    update norm ‖θ_i − Θ‖ is not finite, or more than norm_ratio x the median of the others', is out of range."""
    action: str = "exclude"          # off | warn | exclude (its weight 0, the others' renormalised) | stop
    norm_ratio: float = 10.0         # honest parties stay within 2.1 x (docs/ARCHITECTURE.md, "The upload check")

    def validate(self, cfg, fail) -> None:
        if not (self.norm_ratio > 1 and math.isfinite(self.norm_ratio)):
            fail("fed.upload_check.norm_ratio", f"must be a finite number > 1, got {self.norm_ratio}")


@dataclass
class DPConfig:
    """DP-FedAvg with server-side clipping of each party's update (fedmpi/aggregation/dp.py)."""
    enabled: bool = False
    noise_multiplier: float = 1.0    # z: the noise's standard deviation in units of the clipping norm
    clip: float = 1.0                # C; with adaptive: its value in round 1
    adaptive: bool = False           # Andrew et al. 2021: C follows the target quantile of the update norms
    target_quantile: float = 0.5     # gamma
    clip_lr: float = 0.2             # eta_C
    count_noise: float = 0.0         # sigma_b, the noise on the count of unclipped updates; 0: P / 20
    delta: float = 1e-5              # epsilon is reported at this delta
    target_epsilon: float = 0.0      # > 0: the run stops before a round would take epsilon past it
    seed: int = 0                    # the noise generator's seed (its state is checkpointed)

    def validate(self, cfg, fail) -> None:
        if not self.enabled:
            return
        rule = algorithm_method(cfg)
        why = refusal(cfg, rule)
        if why:
            fail("fed.dp.enabled", why)
        if not self.noise_multiplier > 0:
            fail("fed.dp.noise_multiplier", f"must be > 0, got {self.noise_multiplier}")
        if not self.clip > 0:
            fail("fed.dp.clip", f"must be > 0, got {self.clip}")
        if not 0 < self.delta < 1:
            fail("fed.dp.delta", f"must be in (0, 1), got {self.delta}")
        if self.target_epsilon < 0:
            fail("fed.dp.target_epsilon", f"must be >= 0 (0: no target), got {self.target_epsilon}")
        if self.adaptive:
            if not 0 < self.target_quantile < 1:
                fail("fed.dp.target_quantile", f"must be in (0, 1), got {self.target_quantile}")
            if not self.clip_lr > 0:
                fail("fed.dp.clip_lr", f"must be > 0, got {self.clip_lr}")
            sigma_b = self.count_noise or uploads(cfg) / 20
            if not sigma_b > self.noise_multiplier / 2:
                fail("fed.dp.count_noise", f"adaptive clipping needs count_noise > noise_multiplier / 2 "
                                           f"(Andrew et al. 2021): {sigma_b:g} <= {self.noise_multiplier / 2:g}")
        if self.target_epsilon > 0 and self.rounds_within(cfg.planned_rounds, sampling_rate(cfg)) == 0:
            from fedmpi.aggregation.accounting import epsilon

            first = epsilon(1, self.noise_multiplier, self.delta, sampling_rate(cfg))
            fail("fed.dp.target_epsilon", f"{self.target_epsilon:g} is spent before the first round ends "
                                          f"(epsilon {first:.3g} "
                                          f"after 1 round at delta {self.delta:g})")


    def rounds_within(self, planned: int, sampling_rate: float = 1.0) -> int:
        """The most rounds, up to `planned`, whose ε stays within target_epsilon (all of them without a target)."""
        if not (self.enabled and self.target_epsilon > 0):
            return planned
        return rounds_within_budget(planned, self.noise_multiplier, self.delta, self.target_epsilon, sampling_rate)


def sampling_rate(cfg) -> float:
    """q of the accountant: the share of the clients sampled each round (cross-device), 1 for the silo parties."""
    if not cfg.cross_device:
        return 1.0
    population = cfg.clients.population
    return clients_per_round(population, cfg.clients.fraction if population > 1 else 1.0) / population


def uploads(cfg) -> int:
    """How many uploads the server combines per round: the parties of the silo layout, or the clients sampled."""
    if cfg.cross_device:
        return round(sampling_rate(cfg) * cfg.clients.population)
    return len(cfg.parties) if cfg.fed.setting == "federated" else 1


@functools.lru_cache(maxsize=16)
def rounds_within_budget(planned: int, z: float, delta: float, target: float, q: float) -> int:
    from fedmpi.aggregation.accounting import epsilon

    low, high = 0, planned          # ε(low) <= target; ε grows with the rounds: bisect for the last one within
    while low < high:
        mid = (low + high + 1) // 2
        if epsilon(mid, z, delta, q) <= target:
            low = mid
        else:
            high = mid - 1
    return low


def refusal(cfg, rule) -> str:
    """Why DP-FedAvg cannot protect this run, or ''."""
    if cfg.cross_device and cfg.fed.dp.adaptive:
        return ("adaptive clipping in the cross-device setting needs the trainer ranks to count their unclipped "
                "clients, which is not built: set fed.dp.adaptive=false")
    if fv_runs(cfg):
        return ("Federated Validation scores every party's unclipped, un-noised theta_i on the validators, "
                "which is what DP protects: set fv.enabled=false")
    if rule.classes.rows_to_server:
        return (f"{rule.name} uploads every party's class embeddings W_k, which DP-FedAvg neither clips nor noises "
                f"(it protects the backbone update): use fed.dp with a rule whose class embeddings stay with their "
                f"party (privacyface's clusters have their own DP)")
    if rule.up:
        return (f"{rule.name} uploads {', '.join(rule.up)} besides theta_i, which would go unclipped and "
                f"un-noised: use fedavg, fedavgm, pfm, fedprox or a FedOpt rule")
    if cfg.fed.aggregation.get("rule", "mean") != "mean":
        return (f"fed.aggregation.rule={cfg.fed.aggregation['rule']}: the Gaussian mechanism's sensitivity "
                f"is that of the weighted mean: use rule mean")
    return ""


def validate_aggregation(cfg, fail) -> dict:
    """fed.aggregation checked against the run (its options, the uploads it combines, FV); returned resolved, the
    rule's defaults included, as the log keeps it."""
    name, cls, options = aggregation_rule(cfg)
    if cls.needs_uploads:
        if fv_runs(cfg):
            fail("fed.aggregation.rule", f"{name} with Federated Validation: FV's weights and {name} would each "
                                         f"decide how much a party counts; set fv.enabled=false")
    options.validate(uploads(cfg), fail)
    return {"rule": name, **dataclasses.asdict(options)}


def aggregation_rule(cfg):
    """(name, class, options) of fed.aggregation: the rule's name, its class in the registry and its Options
    read from the section's other keys."""
    section = dict(cfg.fed.aggregation)
    name = section.pop("rule", "mean")
    try:
        cls = aggregator_class(name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return name, cls, typed_section(cls.Options, section, "fed.aggregation")
