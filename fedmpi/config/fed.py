"""The federated rule's sections of the run configuration: `fed` (the rule from fedmpi's registry, the layout
setting, K, w), `fed.server` (the server optimizer) and `fed.options` (the rule's own Options dataclass, built
and validated by the rule). See sections.py for the conventions."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from fedmpi.algorithms.registry import BASELINE, DEFAULT
from fedmpi.config.aggregation import DPConfig, UploadCheckConfig, validate_aggregation
from fedmpi.config.rules import algorithm_method, algorithm_options, paper_local_momentum
from fedmpi.config.secure_aggregation import SecureAggregationConfig


@dataclass
class ServerConfig:
    """The server optimizer on Δ = Θ − Σ w_i θ_i (fedmpi/algorithms/server_optim.py)."""
    optimizer: str = "auto"          # auto (the rule's own) | sgd | momentum | adam | yogi | adagrad
    lr: float | None = None          # eta_s; empty: 1 for sgd and momentum, 0.01 for adam, yogi, adagrad
    momentum: float = 0.9            # momentum (FedAvgM beta)
    nesterov: bool = True            # momentum
    beta1: float = 0.9               # adam, yogi, adagrad: first moment
    beta2: float = 0.99              # adam, yogi: second moment
    tau: float = 1e-3                # adam, yogi, adagrad: adaptivity (Reddi et al. 2021)

    def validate(self, cfg: "Config", fail) -> None:
        from fedmpi.algorithms.server_optim import OPTIMIZERS

        if self.optimizer not in ("auto", *OPTIMIZERS):
            fail("fed.server.optimizer", f"{self.optimizer!r} is not one of auto, {', '.join(OPTIMIZERS)}")
        rule = algorithm_method(cfg)
        if rule.fixed_server_optimizer and self.optimizer not in ("auto", rule.server_optimizer):
            fail("fed.server.optimizer", f"{rule.name} is defined by the {rule.server_optimizer} server optimizer; "
                                         f"for {BASELINE} with the {self.optimizer} server optimizer use "
                                         f"fed.algorithm={BASELINE}")
        if self.lr is not None and not self.lr > 0:
            fail("fed.server.lr", f"must be > 0, got {self.lr}")
        for key in ("momentum", "beta1", "beta2"):
            if not 0 <= getattr(self, key) < 1:
                fail(f"fed.server.{key}", f"must be in [0, 1), got {getattr(self, key)}")
        if not self.tau > 0:
            fail("fed.server.tau", f"must be > 0, got {self.tau}")


@dataclass
class FedConfig:
    algorithm: str = DEFAULT         # a rule of fedmpi/algorithms/registry.py (RULES)
    setting: str = "federated"       # federated | centralized (one party, the union of the data) | solo
    K: int = 100                     # local steps per round
    weighting: str = "uniform"       # initial w: uniform | batch (proportional to party batch size)
    local_momentum: float | None = None   # backbone momentum of local SGD; empty: the rule's paper's (plain SGD
                                          # for FedAvg, FedAvgM, FedProx, SCAFFOLD, FedOpt; PFM and MIME-lite have
                                          # their own and leave it empty); centralized/solo: optim.momentum
    solo_party: str = ""             # solo: which party trains alone
    server: ServerConfig = field(default_factory=ServerConfig)
    options: dict = field(default_factory=dict)   # the rule's own section (its Options dataclass), e.g. mu: 0.01
    aggregation: dict = field(default_factory=lambda: {"rule": "mean"})  # the combination: rule + its options
    dp: DPConfig = field(default_factory=DPConfig)  # central differential privacy (DP-FedAvg)
    upload_check: UploadCheckConfig = field(default_factory=UploadCheckConfig)   # an upload out of range
    secure_aggregation: SecureAggregationConfig = field(default_factory=SecureAggregationConfig)  # the sum only

    def validate(self, cfg: "Config", fail) -> "FedConfig":
        """Check the section against the run; returns it resolved, as a new object (this one is left as it is):
        the paper's local momentum where it is empty, the rule's options and the aggregation rule's with their
        defaults, as a run reads them and its log keeps them."""
        names = [p.name for p in cfg.parties]
        if self.K <= 0:
            fail("fed.K", f"must be > 0, got {self.K}")
        momentum = self.local_momentum if self.local_momentum is not None else paper_local_momentum(cfg)
        if momentum is not None and not 0 <= momentum < 1:
            fail("fed.local_momentum", f"must be in [0, 1), got {momentum}")
        if self.setting == "solo" and self.solo_party not in names:
            fail("fed.solo_party", f"{self.solo_party!r} is not a party (parties: {', '.join(names)})")
        if self.setting != "solo" and self.solo_party:
            fail("fed.solo_party", f"only used with fed.setting=solo, not {self.setting}")
        self.server.validate(cfg, fail)
        options = algorithm_options(cfg)
        options.validate(cfg)
        aggregation = validate_aggregation(cfg, fail)
        self.dp.validate(cfg, fail)
        self.upload_check.validate(cfg, fail)
        self.secure_aggregation.validate(cfg, fail)
        return dataclasses.replace(self, local_momentum=momentum, options=dataclasses.asdict(options),
                                   aggregation=aggregation)
