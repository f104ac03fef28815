"""The one place that turns a validated config into the parts a rank runs with, once per rank: the rule with its
options and server optimizer, the shared model and its flat state, and the server's aggregator (fed.dp's
Gaussian mechanism around the combination that fed.aggregation or the rule names). `Server`, the trainers, the
validators and the settings take these parts; config/ only describes and checks."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from fedmpi.aggregation.aggregators import Aggregator
from fedmpi.aggregation.registry import aggregator_class
from fedmpi.algorithms.base import Algorithm
from fedmpi.algorithms.server_optim import ServerOptimizer
from fedmpi.config import Config
from fedmpi.config.aggregation import uploads
from fedmpi.config.rules import algorithm_method
from fedmpi.core.state import BackboneState
from fedmpi.models.backbone import build_backbone, build_client_model
from fedmpi.models.lrn import fuse_local_response_norms
from fedmpi.models.speed import to_channels_last


@dataclass
class RunParts:
    """What a rank's role is made of."""
    rule: Algorithm                  # fed.algorithm with fed.options and its server optimizer (fed.server)
    model: torch.nn.Module           # the shared model f(Θ), initialised identically on every rank (model.init)
    state: BackboneState             # its flat state [trainable | frozen | buffers]
    aggregator: Aggregator           # how the server combines a round's uploads
    new_model: Callable[[], torch.nn.Module]   # another model of the same kind, to load a Θ into (validators)
    device: torch.device             # where the model and the round's tensors live
    dtype: torch.dtype
    record_uploads: bool = False     # log.record_received: the server keeps the uploads of the rounds it records

    @property
    def every_upload(self) -> bool:
        """The server's aggregator reads each upload, or the server records what it received: cross-device
        trainer ranks then send every client's upload instead of their sum."""
        return self.aggregator.needs_uploads or self.record_uploads


def server_optimizer_name(cfg: Config) -> str:
    """fed.server.optimizer, `auto` being the rule's own (its backbone's)."""
    name = cfg.fed.server.optimizer
    return algorithm_method(cfg).server_optimizer if name == "auto" else name


def build_rule(cfg: Config) -> Algorithm:
    """The rule the config names, with its options and server optimizer."""
    method, s = algorithm_method(cfg), cfg.fed.server
    server = ServerOptimizer.build(server_optimizer_name(cfg), s.lr, momentum=s.momentum, nesterov=s.nesterov,
                                   beta1=s.beta1, beta2=s.beta2, tau=s.tau)
    # the checked config's fed.options holds every field of the rule's Options, typed (config/fed.py)
    return method.from_config(cfg, method.Options(**cfg.fed.options), server)


def build_aggregator(cfg: Config, rule: Algorithm, nonnegative: tuple[slice, ...] = ()) -> Aggregator:
    """The rule's own combination or the one fed.aggregation names; with fed.dp, DP-FedAvg's Gaussian mechanism
    around it (the config refused the combinations whose sensitivity is not that of the mean). `nonnegative`:
    the slices of the payload the noise must leave >= 0 (the BatchNorm running variances)."""
    options = dict(cfg.fed.aggregation)      # checked and resolved: the rule's name and every option, typed
    name = options.pop("rule")
    cls = aggregator_class(name)
    inner = rule.aggregator() if name == "mean" else cls(cls.Options(**options))
    if not cfg.fed.dp.enabled:
        return inner
    from fedmpi.aggregation.dp import GaussianMechanism

    # silo: each party's update clipped at the server; cross-device: each client's on its trainer rank; under
    # secure aggregation each participant clips and adds its share of the noise (distributed DP)
    secure = cfg.fed.secure_aggregation.enabled
    return GaussianMechanism(inner, cfg.fed.dp, uploads(cfg), nonnegative,
                             clip_at_server=not (cfg.cross_device or secure), noised_by_participants=secure)


def clients_train_on_cpu_one_by_one(cfg: Config, device: torch.device) -> bool:
    """The cross-device clients train on CPU, one after the other (not as a vectorised cohort)."""
    return device.type == "cpu" and not cfg.clients.vectorised(cfg, device.type)


def clients_channels_last(cfg: Config, device: torch.device) -> bool:
    """run.channels_last for the cross-device clients' model; empty: on CPU where the clients train one by one
    (McMahan's CNN's step 20 % shorter in NHWC with the fused normalisations, IR-18's 20 %, with the rank's kept
    buffers, core/malloc.py), off for a vectorised cohort (its clients' stacked weights, crossdevice/cohort.py)
    and on a GPU (not measured)."""
    if cfg.run.channels_last is not None:
        return cfg.run.channels_last
    return clients_train_on_cpu_one_by_one(cfg, device)


def build_shared_model(cfg: Config, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """The shared model f(Θ) as this rank runs it: the CIFAR clients' CNN or the IResNet (the silo parties, the
    face clients); the cross-device clients' in NHWC and with fused normalisations where they take them."""
    build = build_client_model if cfg.cross_device and not cfg.clients.face_clients else build_backbone
    model = build(cfg, device, dtype)
    if cfg.cross_device and clients_channels_last(cfg, device):
        to_channels_last(model)      # before the flat state holds its tensors
    if cfg.cross_device and clients_train_on_cpu_one_by_one(cfg, device):
        # McMahan's CNN's step 45 % shorter on one CPU thread (models/lrn.py); under a vectorised cohort's vmap
        # and on a GPU not measured
        fuse_local_response_norms(model)
    return model


def build_parts(cfg: Config, device: torch.device, dtype: torch.dtype) -> RunParts:
    """Every rank's parts, made once at its start from the checked config."""
    model = build_shared_model(cfg, device, dtype)
    if cfg.model.init:   # a pretrained start (rank 0 checked the file against this model before any rank got here)
        from fedmpi.models.pretrained import load_initial_backbone

        load_initial_backbone(model, cfg.model.init)
    state = BackboneState(model)
    rule = build_rule(cfg)
    return RunParts(rule=rule, model=model, state=state, aggregator=build_aggregator(cfg, rule, state.variances),
                    new_model=lambda: build_shared_model(cfg, device, dtype), device=device, dtype=dtype,
                    record_uploads=bool(cfg.log.record_received))
