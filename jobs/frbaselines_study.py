"""The field's own face-recognition baselines beside FedFace, as one study of runs at a named scale: what
`python -m jobs.reproduce fr-baselines --scale SCALE` runs (docs/BASELINES.md; the report is
fedmpi/analysis/frbaselines_report.py).

Every method runs in a layout of LAYOUTS with the same seeds (paired: the same initialisation and data order),
its runs the same budget as every other method's: one configuration, the rule's defaults, no tuning. A method is
one entry of METHODS; a method in another layout is an entry of LAYOUTS and one of METHODS naming it.

Two layouts: "3", FedFace's 3-party setting from scratch; "many", FedFR's shape (many small parties fine-tuning a
model pretrained on a public identity set, each party judged on its own held-out images too). The "many" runs
start from one pretrained model, which the study makes first: the run PRETRAIN trains on the public set alone
(configs/public_pretrain.yaml); `follow_up`, once it is complete, exports its model and classifier with
tools.export into {folder}/start/ and plans the "many" runs, which read them (model.init, model.init_classifier;
their logs keep the files' sha256). Labels of each run in the sweep's index.json:
  method:  a key of METHODS (or "pretrain");  label: its name in tables;  layout: a key of LAYOUTS ("public": the
  pretraining);  seed: run.seed;  baseline: the method each run is compared with, seed by seed
"""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from fedmpi.algorithms.objective import LocalTraining
from fedmpi.algorithms.registry import rule
from fedmpi.analysis.sweep_index import read_index
from jobs.fedface_study import Scale, scale_overrides
from jobs.site import ROOT
from jobs.sweep_plans import METHODS as FEDFACE_METHODS, SETTINGS, RunSpec, _party_names, method


@dataclass(frozen=True)
class Method:
    overrides: tuple[str, ...]       # the rule (fed.algorithm, fed.setting, fv.enabled) and its own options
    layout: str = "3"                # a key of LAYOUTS
    label: str = ""                  # its name in the tables and figures
    baseline: str = "fedavg"         # the method of its layout its runs are compared with, seed by seed


# layout -> the FedFace study's setting it shrinks (jobs/sweep_plans.SETTINGS: config and model); "many": the
# 12-party split of the same three priors, every party small
LAYOUTS = {"3": "a", "many": "f"}
PRETRAIN = "pretrain-public"       # the run that makes the "many" layout's start
PRETRAIN_CONFIG = "configs/public_pretrain.yaml"
START = ("start/init.pth", "start/init_fc.pt")   # in the study's folder: the exported backbone and public classifier

METHODS = {
    "centralized": Method(tuple(FEDFACE_METHODS["centralized"]), label="Centralized"),
    "fedavg": Method(tuple(FEDFACE_METHODS["fedavg"]), label="FedAvg"),
    "pfm": Method(tuple(FEDFACE_METHODS["pfm"]), label="PFM"),
    "fedface": Method(tuple(FEDFACE_METHODS["fedface"]), label="FedFace (PFM + FV)"),
    "fedaws": Method(tuple(method("fedaws")), label="FedAwS"),
    "fedgc": Method(tuple(method("fedgc")), label="FedGC"),
    "privacyface": Method(tuple(method("privacyface")), label="PrivacyFace"),
    # from the pretrained start: FedAvg and FedFace as above, and FedFR (which also reads the public set)
    "fedavg-pre": Method(tuple(FEDFACE_METHODS["fedavg"]), layout="many", label="FedAvg, pretrained",
                         baseline="fedavg-pre"),
    "fedface-pre": Method(tuple(FEDFACE_METHODS["fedface"]), layout="many", label="FedFace, pretrained",
                          baseline="fedavg-pre"),
    "fedfr": Method(tuple(method("fedfr")), layout="many", label="FedFR", baseline="fedavg-pre"),
    # FedAvg given what FedFR's local training spends: its momentum and its mean local steps a round (about 95 at
    # the cpu scale, measured), so that FedFR's objective is compared apart from its optimizer and length
    "fedavg-pre-budget": Method((*FEDFACE_METHODS["fedavg"], "fed.local_momentum=0.9", "fed.K=95",
                                 "optim.steps_per_epoch=570"), layout="many",
                                label="FedAvg, pretrained, FedFR's momentum and steps", baseline="fedavg-pre"),
}
BASELINE = "fedavg"        # the 3-party layout's baseline


@dataclass(frozen=True)
class ManyParties:
    """FedFR's setting shrunk: 12 parties of few identities (the 12-party split of the three priors), a public
    identity set, a model pretrained on it, each party's held-out images."""
    identities: tuple[int, int]      # per prior (over its 4 parties): identities, images per identity
    public: tuple[int, int]          # the public set: identities, images per identity
    heldout: int                     # data.heldout
    batch: int                       # images per party and step
    rounds: int
    K: int                           # local steps a round of the rules without a schedule of their own
    lr: float                        # every "many" run's optim.lr (each rule its own local optimizer)
    pretrain: tuple[str, ...]        # the pretraining run's schedule and learning rate
    model: tuple[str, ...]           # every "many" run's and the pretraining's: image size, backbone, head
    fedfr: tuple[str, ...] = ()      # FedFR's options at this scale


@dataclass(frozen=True)
class FRScale:
    base: Scale                                  # the FedFace study's shrink (model, data, K, schedule)
    seeds: tuple[int, ...] = (0, 1)
    methods: tuple[str, ...] = ()                # keys of METHODS; empty: every one
    common: tuple[str, ...] = ()                 # overrides of every run (evaluation)
    many: ManyParties | None = None              # the "many" layout and its pretraining (None: not run)
    rationale: str = ""


CPU_RATIONALE = (
    "The FedFace CPU study's shrink of the paper's 3-party setting (a), IR-18 ArcFace: 16x16 pixels, IR width 0.25, "
    "64-d embeddings, s = 32 and margin 0.2, parties of 64/64/48 synthetic identities, 32 images per step on 1 rank "
    "each, K = 4 local steps, 384 steps in 96 rounds (lr 0.1, x0.1 after 320 steps). Every method runs its rule's "
    "defaults (docs/BASELINES.md), the same two seeds, one run per seed: FedAwS one plain spreadout step of "
    "lambda*eta per round (tau = 0.4, mean over the ordered pairs); FedGC one correction step of lambda*eta with "
    "s = 32 (the heads' scale); PrivacyFace one cluster per party and round (kappa = 0.8, epsilon_1 = epsilon_2 = "
    "0.1, epsilon_3 = 0.5, delta = 1e-5, n_min = 20). FedFace's FV runs adaptively beside training (phi 0.1), as in "
    "the FedFace study. The held-out evaluation (5 folds of 60 pairs of each of the five sets) and the synthetic "
    "IJB-C (50 subjects, 200 templates, about 300 genuine and 2,700 impostor template pairs: a FAR below 1/2,700 is "
    "read at the ROC's nearest point) run after round 1 and every 16 rounds. Two seeds: the FedFace study found "
    "seed-to-seed spreads of up to 5 points at this scale, so methods are compared seed by seed (paired).")

MANY_RATIONALE = (
    "The many-party layout (FedFR's shape: 40 parties of 100 identities fine-tuning a model pretrained on 6,000 "
    "public identities) is 12 parties of 10 identities x 14 images (the 12-party split of the three priors), 4 "
    "images of each identity held out (the personalised test images), a public set of 180 identities x 12 images "
    "and a start pretrained on it alone (1,000 steps of 64 images, lr 0.1, x0.1 after 700 and 900 steps; exported "
    "with tools.export), CosFace s = 30, m = 0.4 (FedFR's) for the pretraining and every run from it, 16 images per "
    "party and step, 6 rounds, lr 0.01 with each rule's local optimizer (FedAvg and FedFace: plain SGD and PFM, K "
    "= 40 local steps a round, about FedFR's mean epochs over the party's own images; FedFR: its 10, 8, 6, 4, 4, 4 "
    "epochs over its combined set with momentum 0.9; and FedAvg again with FedFR's momentum 0.9 and K = 95, its "
    "mean local steps a round as measured here, to tell its objective from its optimizer and length). FedFR's hard-negative threshold is 0.7, not its code's 0.4: "
    "with this small pretrained model (64-d, 16 px) 0.4 chose 56-83 % of the public images for every party (a "
    "measured pilot), 0.7 about 8 % (180 images a party in round 1, 120 in round 6, against its 100 own). The generic model is evaluated "
    "after every round on the pair sets and the synthetic IJB-C, each party's personal model (its backbone after "
    "its local training, FedFR: and its converter) on every party's held-out images (1:1 TAR, 1:N TPIR at FAR "
    "1e-2 and 1e-1).")

CPU_MANY = ManyParties(
    identities=(40, 14), public=(180, 12), heldout=4, batch=16, rounds=6, K=40, lr=0.01,
    pretrain=("optim.lr=0.1", "optim.batch_size=64", "optim.epochs=10", "optim.steps_per_epoch=100",
              "optim.milestones=[7,9]", "fed.K=100"),
    model=("data.image_size=16", "data.workers=0", "data.val_pairs_per_fold=60", "model.width=0.25",
           "model.embedding_size=64", "model.head=cosface", "model.scale=30.0", "model.margin=0.4",
           "run.device=cpu", "log.tensorboard=false"),
    fedfr=("fed.options.threshold=0.7",))

SCALES = {
    "cpu": FRScale(
        base=Scale(K=4, steps=(6, 64, [5]), batch=32, parties={"ms1m": (64, 16), "ga": (64, 16), "vgg": (48, 20)},
                   margins={"arcface": 0.2, "cosface": 0.14},
                   common=("data.image_size=16", "data.workers=0", "data.val_pairs_per_fold=60", "model.width=0.25",
                           "model.embedding_size=64", "model.scale=32.0", "fv.phi=0.1", "fv.iterations_per_round=0",
                           "run.device=cpu")),
        common=("eval.every=16", "eval.sets.ijbc=synthetic", "log.tensorboard=false"),
        many=CPU_MANY, rationale=f"{CPU_RATIONALE} {MANY_RATIONALE}"),
    "tiny": FRScale(
        base=Scale(K=2, steps=(1, 4, []), batch=8, parties={"ms1m": (8, 4), "ga": (8, 4), "vgg": (8, 4)},
                   common=("data.image_size=16", "data.workers=0", "data.val_pairs_per_fold=10", "model.width=0.125",
                           "model.embedding_size=16", "model.scale=16.0", "model.margin=0.1", "fv.phi=0.3",
                           "fv.iterations_per_round=1", "run.device=cpu")),
        seeds=(0, 1), methods=("fedavg", "fedgc", "privacyface"),
        common=("eval.every=1", "eval.sets.ijbc=synthetic", "log.tensorboard=false"),
        rationale="The smallest study that fills every table: a pipeline test, not a result."),
}


def _labels(key: str, seed: int) -> dict:
    m = METHODS[key]
    return {"method": key, "label": m.label, "layout": m.layout, "seed": seed,
            "baseline": BASELINE if m.layout == "3" else m.baseline}


def _spec(scale: FRScale, key: str, seed: int) -> RunSpec:
    m = METHODS[key]
    setting = LAYOUTS[m.layout]
    config, base = SETTINGS[setting]
    overrides = [*base, *m.overrides, *scale_overrides(scale.base, config, setting), *scale.common,
                 f"run.seed={seed}"]
    return RunSpec(f"{key}-s{seed}", config, tuple(overrides), _labels(key, seed))


def _methods(scale: FRScale, layout: str) -> list[str]:
    return [k for k in scale.methods or METHODS if METHODS[k].layout == layout]


def pretrain_spec(scale: FRScale) -> RunSpec:
    """The public set trained alone: the "many" layout's start (its newest checkpoint is what follow_up exports)."""
    many = scale.many
    return RunSpec(PRETRAIN, PRETRAIN_CONFIG,
                   (*many.model, *many.pretrain, f"parties.public.data.identities={many.public[0]}",
                    f"parties.public.data.images_per_identity={many.public[1]}", "eval.every=10", "run.seed=0"),
                   {"method": "pretrain", "label": "pretraining on the public set", "layout": "public", "seed": 0,
                    "baseline": ""})


def many_spec(scale: FRScale, key: str, seed: int, start: tuple[str, str]) -> RunSpec:
    """A run of the "many" layout from the pretrained start (`start`: the backbone and public classifier files)."""
    many, m = scale.many, METHODS[key]
    config, base = SETTINGS[LAYOUTS["many"]]
    algorithm = rule(next(o.split("=", 1)[1] for o in m.overrides if o.startswith("fed.algorithm=")))
    # a rule with a local objective sets its round's length itself (FedFR's epochs): one "step" a round here
    own_rounds = algorithm.training is not LocalTraining
    rounds = (["fed.K=1", "optim.epochs=1", f"optim.steps_per_epoch={many.rounds}", *many.fedfr] if own_rounds
              else [f"fed.K={many.K}", "optim.epochs=1", f"optim.steps_per_epoch={many.rounds * many.K}"])
    parties = [o for name in _party_names(config)
               for o in (f"parties.{name}.ranks=1", f"parties.{name}.data.identities={many.identities[0]}",
                         f"parties.{name}.data.images_per_identity={many.identities[1]}")]
    own_start = [f"model.init={start[0]}"]
    if algorithm.training.public_identities:     # it trains over the public identities too: their set and pretrained rows
        own_start += [f"model.init_classifier={start[1]}", "data.public.kind=synthetic",
                      f"data.public.identities={many.public[0]}", f"data.public.images_per_identity={many.public[1]}"]
    # the method's own overrides last: they may change its round length
    overrides = [*base, *many.model, *parties, f"optim.lr={many.lr}", f"optim.batch_size={many.batch}",
                 "optim.milestones=[]", *rounds, f"data.heldout={many.heldout}", "eval.every=1",
                 "eval.personal_fars=[0.01,0.1]", "eval.sets.ijbc=synthetic", "fv.phi=0.1", "fv.iterations_per_round=0",
                 *own_start, *m.overrides, f"run.seed={seed}"]
    return RunSpec(f"{key}-s{seed}", config, tuple(overrides), _labels(key, seed))


def study(scale: FRScale) -> list[RunSpec]:
    """Seed by seed, every method but the "many" layout's (a study cut short has whole pairs); the pretraining first
    when the scale has the "many" layout, whose runs follow_up plans once it is done."""
    first = [pretrain_spec(scale)] if scale.many and _methods(scale, "many") else []
    return first + [_spec(scale, key, seed) for seed in scale.seeds for key in scale.methods or METHODS
                    if METHODS[key].layout != "many"]


def export_start(folder: Path) -> tuple[str, str]:
    """The pretraining's model and public classifier as tools.export writes them, in {folder}/start/ (kept: a
    resumed study reads the same files). A ValueError when the pretraining did not complete."""
    folder = Path(folder)
    row = next((r for r in read_index(folder)["runs"] if r["name"] == PRETRAIN), None)
    if row is None or row.get("state") != "COMPLETED":
        raise ValueError(f"the pretraining run {PRETRAIN} did not complete (see {folder}/runs/{PRETRAIN}/"
                         "stderr.txt): the runs from its start cannot run")
    backbone, classifier = (folder / f for f in START)
    if not (backbone.is_file() and classifier.is_file()):
        done = subprocess.run([sys.executable, "-m", "tools.export", row["log_dir"], "--out", str(backbone),
                               "--classifier", "public", "--classifier-out", str(classifier)],
                              capture_output=True, text=True, cwd=ROOT, timeout=600)
        if done.returncode:
            raise ValueError(f"tools.export of {row['log_dir']}: {done.stderr.strip().splitlines()[-1]}")
    return str(backbone), str(classifier)


def follow_up(scale: FRScale, folder: Path) -> list[RunSpec]:
    """The "many" layout's runs, seed by seed, from the start exported from the completed pretraining."""
    if not (scale.many and _methods(scale, "many")):
        return []
    start = export_start(folder)
    return [many_spec(scale, key, seed, start) for seed in scale.seeds for key in _methods(scale, "many")]
