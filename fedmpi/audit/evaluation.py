"""The evaluation model that scores a reconstruction's identity (spec §3.2): one that did not train on the
participants' data. By default the run's pretrained start (`model.init`); `--evaluation-model PATH` names another
state_dict of the run's backbone (a model of another party, a second public pretraining). Where the run has no
start file and the round is the first, Θ before the round is the start itself. Past round 1 with neither, Θ before
the round has trained on the participants' data: refused, naming the option."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from fedmpi.models.pretrained import InitError, load_initial_backbone

from .run_view import Refused, model_at

OPTION = "--evaluation-model"


@dataclass(frozen=True)
class Evaluation:
    """The model that embeds real images and reconstructions alike, and what it is in words."""
    model: torch.nn.Module
    words: str

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype


def loaded(cfg, theta: torch.Tensor, path, key: str) -> torch.nn.Module:
    """The run's backbone holding the state_dict in `path`, or Refused naming `key` and the mismatch."""
    model, _ = model_at(cfg, theta)
    try:
        load_initial_backbone(model, path, key, where=f"{key} {path}")
    except InitError as error:
        raise Refused(str(error)) from None
    return model


def evaluation_model(view, options) -> Evaluation:
    """The independent model that scores identity in this audit (module docstring), or Refused."""
    cfg, theta = view.cfg, view.received["theta_before"]
    named = getattr(options, "evaluation_model", None)
    if named:
        return Evaluation(loaded(cfg, theta, named, OPTION), f"{named} ({OPTION})")
    if cfg.model.init:
        return Evaluation(loaded(cfg, theta, cfg.model.init, "model.init"),
                          f"the run's pretrained start {cfg.model.init} (model.init)")
    if view.round == 1:
        return Evaluation(model_at(cfg, theta)[0], "Θ before round 1: the run's start (no model.init: a fresh "
                                                  "model, which has not trained on any participant's data)")
    raise Refused(f"round {view.round}: Θ before it trained on the participants' data and the run has no "
                  f"model.init to score identity with: name an independent model by {OPTION} PATH (a state_dict "
                  f"of the run's backbone, as python -m tools.export writes)")
