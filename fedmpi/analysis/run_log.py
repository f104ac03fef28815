"""The analysis tools' runs: finding logs (a log file, a run folder, a sweep folder with its index.json),
reading one into memory, method names and colours (from fedmpi's registry of rules), settings, and the tools'
command-line plumbing. Tables are in fedmpi/analysis/tables.py, figures in fedmpi/analysis/plots.py."""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from fedmpi.algorithms.registry import SINGLE_PARTY_SETTINGS
from fedmpi.analysis.methods import method_label
from fedmpi.store.h5log import LogReader, LogSchemaError
from fedmpi.analysis.methods import FV_SUFFIX

LOG_NAME = "log.h5"

METRIC_NAMES = {"accuracy": "verification accuracy", "accuracy_std": "accuracy std over folds",
                "tar_far_1e-3": "TAR @ FAR=1e-3", "tar_far_1e-2": "TAR @ FAR=1e-2",
                "headline": "result (accuracy; IJB-B TAR@FAR=1e-4, IJB-C TAR@FAR=1e-5, MegaFace rank-1)",
                **{f"tar_far_1e-{k}": f"TAR @ FAR=1e-{k}" for k in (1, 4, 5, 6)},
                "rank1": "rank-1 identification (largest gallery)",
                **{f"rank1_1e{k}": f"rank-1 identification, 1e{k} distractors" for k in range(1, 7)},
                **{f"tpir_far_1e-{k}": f"1:N TPIR @ FAR=1e-{k} (personalised)" for k in range(1, 7)}}
CENTRALIZED_PARTY = "centralized"    # the single party name a centralized run logs
UNION_ROW = "union\u2020"
UNION_FOOTNOTE = ("\u2020 centralized: union loss \u2014 the centralized baseline trains on the union of all "
                  "parties' data and logs one loss over it; per-party losses are not in its log.")


class AnalysisError(ValueError):
    """Bad input to an analysis tool; the message names what is wrong."""


# ------------------------------------------------------------------ runs


@dataclass
class Run:
    """One run's log, read into memory (a log still being written is read as it stands)."""
    path: Path
    algorithm: str
    parties: list[str]
    val_sets: list[str]
    config: dict
    rounds: dict[str, np.ndarray]
    fv: dict[str, np.ndarray]
    eval: dict[str, np.ndarray]
    personal: dict[str, np.ndarray] = field(default_factory=dict)   # /personal: round, <metric> [rows, P]
    label: str = ""
    settings: list[str] = field(default_factory=list)   # from --setting globs or the sweep index
    index_entry: dict = field(default_factory=dict)

    def cfg(self, dotted: str, default=None):
        node = self.config
        for key in dotted.split("."):
            if not isinstance(node, dict) or key not in node:
                return default
            node = node[key]
        return node

    @property
    def fv_enabled(self) -> bool:
        return bool(self.cfg("fv.enabled", False)) or len(self.fv.get("round", ())) > 0

    @property
    def fv_norm(self) -> str | None:
        return self.cfg("fv.norm") if self.fv_enabled else None

    @property
    def base_method(self) -> str:
        """FedAvg, PFM, ...: the algorithm alone; with FV: FedAvg+FV, PFM+FV (FedFace), ..."""
        name = method_label(self.algorithm)[0]
        return name + FV_SUFFIX if self.fv_enabled and not self.single_party else name

    @property
    def setting(self) -> str:
        """fed.setting of the run (federated, centralized, solo); logs of earlier versions named the last two
        as fed.algorithm."""
        return self.cfg("fed.setting") or (self.algorithm if self.algorithm in SINGLE_PARTY_SETTINGS else "federated")

    @property
    def single_party(self) -> bool:
        """A baseline whose runs K does not change (one party: the average is its own model)."""
        return self.setting in SINGLE_PARTY_SETTINGS

    @property
    def method(self) -> str:
        """base_method, marked when FV uses the Moving Norm (the paper's runs use Local Norm, Sec. 4.4)."""
        return self.base_method + (" moving-norm" if self.fv_norm == "moving" else "")

    @property
    def solo_party(self) -> str | None:
        if self.setting != "solo":
            return None
        party = self.cfg("fed.solo_party")
        if party in self.parties:
            return party
        if len(self.parties) == 1:
            return self.parties[0]
        raise AnalysisError(f"{self.path}: solo run names no trained party (fed.solo_party={party!r}, "
                            f"log parties {self.parties})")

    @property
    def derived_setting(self) -> str:
        """The paper's panel caption (Fig. 4): e.g. 'IR-18-AF, 3-party, K=100'."""
        return f"{self.model_short}, {self.n_parties}-party, K={self.cfg('fed.K', '?')}"

    @property
    def model_short(self) -> str:
        head = {"arcface": "AF", "cosface": "CF"}.get(self.cfg("model.head", ""), str(self.cfg("model.head", "?")))
        return f"{backbone_name(self.cfg('model.backbone', '?'))}-{head}"

    @property
    def model_long(self) -> str:
        """The paper's Table 1 'Model' column: e.g. 'IR-18 ArcFace'."""
        head = {"arcface": "ArcFace", "cosface": "CosFace"}.get(self.cfg("model.head", ""),
                                                                 str(self.cfg("model.head", "?")))
        return f"{backbone_name(self.cfg('model.backbone', '?'))} {head}"

    @property
    def n_parties(self) -> int:
        parties = self.cfg("parties")
        return len(parties) if isinstance(parties, list) and parties else len(self.parties)

    @property
    def planned_rounds(self) -> int | None:
        epochs, spe, k = self.cfg("optim.epochs"), self.cfg("optim.steps_per_epoch"), self.cfg("fed.K")
        if not all(isinstance(v, int) and v > 0 for v in (epochs, spe, k)):
            return None
        return epochs * spe // k

    def loss(self, party: str) -> np.ndarray:
        """Per-round mean training loss of one party (the /rounds/loss column of that party)."""
        return self.party_column("loss", party)

    def update_norm(self, party: str) -> np.ndarray:
        """Per-round update norm ‖θ_i − Θ‖ of one party's upload (NaN where it was not measured, or where the log
        was written before the column existed)."""
        return self.party_column("update_norm", party)

    def party_column(self, column: str, party: str) -> np.ndarray:
        """One party's values of a per-party /rounds column; NaN for every round where the log has no such column."""
        if party not in self.parties:
            raise AnalysisError(f"{self.path}: no party {party!r} in the log (parties {self.parties})")
        rounds = len(self.rounds.get("round", ()))
        values = self.rounds.get(column)
        if values is None:
            return np.full(rounds, np.nan)
        return values[:, self.parties.index(party)] if values.size else np.zeros(0)

    def step_of_round(self, rounds: np.ndarray) -> np.ndarray:
        """Global step at the end of each given round: from /rounds where logged, else (round + 1) * K."""
        logged = self.rounds.get("round", np.zeros(0)).tolist()
        known = dict(zip(logged, self.rounds.get("step", np.zeros(0)).tolist()))
        k = self.cfg("fed.K", 1)
        return np.array([known.get(int(r), (int(r) + 1) * k) for r in rounds], dtype=np.int64)

    def eval_metric(self, val_set: str, metric: str) -> np.ndarray:
        return self.eval.get(f"{val_set}/{metric}", np.zeros(0))

    def personal_value(self, metric: str, at: str = "final") -> float:
        """The personalised evaluation's metric, the mean over the parties of its last logged value ('final') or
        of the largest one ('best'); NaN where nothing is logged."""
        values = self.personal.get(metric, np.zeros((0, 0)))
        if not values.size:
            return math.nan
        means = np.nanmean(values, axis=1)
        return float(means[-1] if at == "final" else np.nanmax(means))

    def eval_value(self, val_set: str, metric: str, at: str = "final") -> float:
        """The metric's last logged value ('final') or its largest ('best'); NaN where nothing is logged."""
        values = self.eval_metric(val_set, metric)
        values = values[~np.isnan(values)] if values.size else values
        if not values.size:
            return math.nan
        return float(values[-1] if at == "final" else values.max())


def backbone_name(backbone: str) -> str:
    """ir18 -> IR-18."""
    text = str(backbone)
    return f"IR-{text[2:]}" if text.lower().startswith("ir") and text[2:].isdigit() else text


def load_run(path: Path) -> Run:
    with LogReader(path) as log:
        config_text = log.config_yaml
        try:
            config = yaml.safe_load(config_text) or {}
        except yaml.YAMLError as exc:
            raise AnalysisError(f"{path}: the config stored in the log is not valid YAML ({exc})") from None
        return Run(path=Path(path), algorithm=log.algorithm, parties=log.parties, val_sets=log.val_sets,
                   config=config if isinstance(config, dict) else {}, rounds=log.table("rounds"),
                   fv=log.table("fv"), eval=log.table("eval"), personal=log.table("personal"))


def party_row_name(party: str) -> str:
    return UNION_ROW if party == CENTRALIZED_PARTY else party


# ------------------------------------------------------------------ command line


def add_run_args(parser: argparse.ArgumentParser, settings: bool = True) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN_OR_SWEEP",
                        help="a log file, a run folder holding log.h5, or a sweep folder (every log.h5 below "
                             "it; its index.json, if present, gives each run's setting)")
    if settings:
        parser.add_argument("--setting", action="append", metavar="NAME=GLOB",
                            help="put runs whose path, folder or name matches GLOB into setting NAME "
                                 "(repeatable; runs matching no glob are left out; default: the sweep index's "
                                 "setting, else the setting derived from each run's config, e.g. "
                                 "'IR-18-AF, 3-party, K=100')")








def cli(main, argv=None) -> int:
    """Run a tool's main; a problem with the input prints one line `error: ...` and gives exit status 2."""
    try:
        main(argv)
    except (AnalysisError, LogSchemaError, ValueError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
