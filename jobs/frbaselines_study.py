"""The field's own face-recognition baselines beside FedFace, as one study of runs at a named scale: what
`python -m jobs.reproduce fr-baselines --scale SCALE` runs (docs/BASELINES.md; the report is
fedmpi/analysis/frbaselines_report.py).

Every method runs in a layout of LAYOUTS with the same seeds (paired: the same initialisation and data order),
its runs the same budget as every other method's: one configuration, the rule's defaults, no tuning. A method is
one entry of METHODS; a method in another layout (many small parties, as FedFR's) is an entry of LAYOUTS and one
of METHODS naming it. Labels of each run in the sweep's index.json:
  method:  a key of METHODS;  label: its name in tables;  layout: a key of LAYOUTS;  seed: run.seed;
  baseline: the method each run is compared with, seed by seed
"""
from __future__ import annotations

from dataclasses import dataclass

from jobs.fedface_study import Scale, scale_overrides
from jobs.sweep_plans import METHODS as FEDFACE_METHODS, SETTINGS, RunSpec, method


@dataclass(frozen=True)
class Method:
    overrides: tuple[str, ...]       # the rule (fed.algorithm, fed.setting, fv.enabled) and its own options
    layout: str = "3"                # a key of LAYOUTS
    label: str = ""                  # its name in the tables and figures


# layout -> the FedFace study's setting it shrinks (jobs/sweep_plans.SETTINGS: config and model)
LAYOUTS = {"3": "a"}

METHODS = {
    "centralized": Method(tuple(FEDFACE_METHODS["centralized"]), label="Centralized"),
    "fedavg": Method(tuple(FEDFACE_METHODS["fedavg"]), label="FedAvg"),
    "pfm": Method(tuple(FEDFACE_METHODS["pfm"]), label="PFM"),
    "fedface": Method(tuple(FEDFACE_METHODS["fedface"]), label="FedFace (PFM + FV)"),
    "fedaws": Method(tuple(method("fedaws")), label="FedAwS"),
    "fedgc": Method(tuple(method("fedgc")), label="FedGC"),
    "privacyface": Method(tuple(method("privacyface")), label="PrivacyFace"),
}
BASELINE = "fedavg"        # each method's paired difference is taken against it, seed by seed, in its layout


@dataclass(frozen=True)
class FRScale:
    base: Scale                                  # the FedFace study's shrink (model, data, K, schedule)
    seeds: tuple[int, ...] = (0, 1)
    methods: tuple[str, ...] = ()                # keys of METHODS; empty: every one
    common: tuple[str, ...] = ()                 # overrides of every run (evaluation)
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

SCALES = {
    "cpu": FRScale(
        base=Scale(K=4, steps=(6, 64, [5]), batch=32, parties={"ms1m": (64, 16), "ga": (64, 16), "vgg": (48, 20)},
                   margins={"arcface": 0.2, "cosface": 0.14},
                   common=("data.image_size=16", "data.workers=0", "data.val_pairs_per_fold=60", "model.width=0.25",
                           "model.embedding_size=64", "model.scale=32.0", "fv.phi=0.1", "fv.iterations_per_round=0",
                           "run.device=cpu")),
        common=("eval.every=16", "eval.sets.ijbc=synthetic", "log.tensorboard=false"),
        rationale=CPU_RATIONALE),
    "tiny": FRScale(
        base=Scale(K=2, steps=(1, 4, []), batch=8, parties={"ms1m": (8, 4), "ga": (8, 4), "vgg": (8, 4)},
                   common=("data.image_size=16", "data.workers=0", "data.val_pairs_per_fold=10", "model.width=0.125",
                           "model.embedding_size=16", "model.scale=16.0", "model.margin=0.1", "fv.phi=0.3",
                           "fv.iterations_per_round=1", "run.device=cpu")),
        seeds=(0, 1), methods=("fedavg", "fedgc", "privacyface"),
        common=("eval.every=1", "eval.sets.ijbc=synthetic", "log.tensorboard=false"),
        rationale="The smallest study that fills every table: a pipeline test, not a result."),
}


def _spec(scale: FRScale, key: str, seed: int) -> RunSpec:
    m = METHODS[key]
    setting = LAYOUTS[m.layout]
    config, base = SETTINGS[setting]
    overrides = [*base, *m.overrides, *scale_overrides(scale.base, config, setting), *scale.common,
                 f"run.seed={seed}"]
    return RunSpec(f"{key}-s{seed}", config, tuple(overrides),
                   {"method": key, "label": m.label, "layout": m.layout, "seed": seed, "baseline": BASELINE})


def study(scale: FRScale) -> list[RunSpec]:
    """Seed by seed, every method: a study cut short has whole pairs."""
    return [_spec(scale, key, seed) for seed in scale.seeds for key in scale.methods or METHODS]
