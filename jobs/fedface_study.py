"""FedFace's experiments (Bai et al. 2021, Table 1, Fig. 4-6) as one study of runs, at a named scale: what
`python -m jobs.reproduce fedface --scale SCALE` runs.

Each run is a RunSpec of jobs/sweep_plans.py built from the fig4 sweep's settings and methods, shrunk by the scale's
overrides, with labels that say where the report uses it:
  fig4:    the Fig. 4 settings (a..f) it is compared in (a centralized run is the baseline of every setting of
           its backbone, head and data: K does not change a single party's training)
  table1:  the Table 1 block (model) it fills, or ""
  seed:    run.seed; the extra seeds run the scale's `seeded` settings again, for the error bars
  fig5:    "local" / "moving" for the FV runs of the norm comparison, else ""
  fig6:    whether its FV weights are drawn in Fig. 6
  bad:     "shuffled" (one party's labels permuted: parties.NAME.data.shuffle_labels) / "clean" (its twin), or ""
"""
from __future__ import annotations

from dataclasses import dataclass

from fedmpi.analysis.methods import FEDFACE_METHODS, TABLE1_STUDY_METHODS
from jobs.sweep_plans import METHODS, SETTINGS, RunSpec, _party_names

FV_METHODS = tuple(key for key, (_, _, fv) in FEDFACE_METHODS.items() if fv)
TABLE1_MODELS = {"a": "IR-18 ArcFace", "d": "IR-18 CosFace", "e": "IR-34 ArcFace"}
K_RATIO = {s: int(next(o for o in base if o.startswith("fed.K=")).split("=")[1]) // 100
           for s, (_, base) in SETTINGS.items()}      # a, d, e, f: 1; b: 4; c: 16 (the paper's 100/400/1600)


@dataclass(frozen=True)
class Scale:
    """How far the paper's runs are shrunk; every field is a dimension of the study."""
    K: int                                    # setting (a)'s K; (b) and (c) run 4K and 16K
    steps: tuple[int, int, list[int]]         # optim.epochs, optim.steps_per_epoch, optim.milestones (epochs)
    parties: dict                             # style -> (identities, images per identity); 1 rank per party
    batch: int                                # per trainer rank in the 3-party layout; 12-party: batch / 4
    settings: tuple[str, ...] = tuple(SETTINGS)
    methods: tuple[str, ...] = tuple(METHODS)
    seeds: tuple[int, ...] = (0, 1)           # the `seeded` settings run once per seed, the others with the first
    seeded: tuple[str, ...] = ("a",)
    moving_norm: bool = True                  # Fig. 5: the FV methods of (a) again with fv.norm=moving
    bad_party: str = "ga"                     # FedFace in (a) with this party's labels shuffled ("" : none)
    margins: dict | None = None               # head -> model.margin
    common: tuple[str, ...] = ()              # overrides of every run
    rationale: str = ""                       # why this scale (printed in the results file)


SCALES = {
    "cpu": Scale(
        K=4, steps=(6, 64, [5]), batch=32, seeded=("a", "c"),
        parties={"ms1m": (64, 16), "ga": (64, 16), "vgg": (48, 20)},
        margins={"arcface": 0.2, "cosface": 0.14},
        common=("data.image_size=16", "data.workers=0", "data.val_pairs_per_fold=60", "model.width=0.25",
                "model.embedding_size=64", "model.scale=32.0", "fv.phi=0.1", "fv.iterations_per_round=0",
                "eval.every=100000", "run.device=cpu"),
        rationale=(
            "Planned from calibration runs made before this study (this study's own per-run wall and CPU "
            "times are in the table below): 39 runs must fit about 45 minutes of 2 CPU cores, i.e. roughly "
            "130 CPU-seconds a run, of which starting 4 ranks (torch imports, data, process groups) takes about "
            "17. Settings (a) and (c), the smallest and the largest K, run with two seeds: an earlier study at "
            "this scale with one seed outside (a) showed the methods' differences at K = 64 (2-3 points) no "
            "larger than (a)'s seed-to-seed spread (up to 4.9 points), so those comparisons are made seed by "
            "seed (the same initialisation and data order; the centralized baseline cancels). At 16x16 pixels, IR width 0.25 and 32 images per rank a training step of the three parties "
            "costs about 0.15 CPU-s, so a run "
            "trains 384 steps (6 epochs of 64, lr x0.1 after epoch 5), every party on 1 rank (the paper: 8/4/4 "
            "GPUs). K = 4, 16, 64 keeps the paper's 1:4:16 and leaves 96, 24 and 6 rounds (the paper: 3328, "
            "832, 208). The margins are the paper's times 0.4 (ArcFace 0.2, CosFace 0.14, scale 32): with "
            "m = 0.5 the loss barely moves in 384 steps. Parties of 64/64/48 identities keep the classifier "
            "learnable in that many steps. FV runs adaptively beside training (the "
            "paper's asynchronous mode, phi 0.1 instead of 0.01 since it completes tens of iterations, not "
            "thousands); each of the 5 validation sets has 10 folds of 60 pairs, 5 folds for FV and 5 (300 "
            "pairs) for the held-out evaluation: one pair is 0.33 points of accuracy, and the standard error "
            "of an accuracy near 75 % is about 2.5 points per set (1.1 over the mean of 5 sets).")),
    "tiny": Scale(
        K=2, steps=(1, 6, []), batch=16,
        parties={"ms1m": (16, 4), "ga": (16, 4), "vgg": (16, 4)},
        settings=("a",), methods=("centralized", "fedface"), seeds=(0,), moving_norm=False,
        common=("data.image_size=16", "data.workers=0", "data.val_pairs_per_fold=10", "model.width=0.25",
                "model.embedding_size=32", "model.scale=32.0", "model.margin=0.1", "fv.phi=0.3",
                "fv.iterations_per_round=1", "eval.every=100000", "run.device=cpu"),
        rationale="The smallest study that fills every table: a pipeline test, not a result."),
}


def scale_overrides(scale: Scale, config: str, setting: str) -> list[str]:
    """The scale's overrides of one setting: K, schedule, party sizes and ranks, batch, margin."""
    epochs, per_epoch, milestones = scale.steps
    names = _party_names(config)
    per_party = scale.batch if len(names) <= 3 else max(1, scale.batch * 3 // len(names))
    out = [f"fed.K={scale.K * K_RATIO[setting]}", f"optim.epochs={epochs}", f"optim.steps_per_epoch={per_epoch}",
           f"optim.milestones=[{','.join(map(str, milestones))}]", f"optim.batch_size={per_party}"]
    for name in names:
        style = name.split("_")[0]
        identities, images = scale.parties[style]
        out += [f"parties.{name}.ranks=1", f"parties.{name}.data.identities={identities}",
                f"parties.{name}.data.images_per_identity={images}"]
    head = next(o for o in SETTINGS[setting][1] if o.startswith("model.head=")).split("=")[1]
    if scale.margins:
        out.append(f"model.margin={scale.margins[head]}")
    return [*scale.common, *out]


def _spec(setting: str, method: str, scale: Scale, seed: int, name: str, extra: list[str], **labels) -> RunSpec:
    config, base = SETTINGS[setting]
    overrides = [*base, *METHODS[method], *scale_overrides(scale, config, setting), f"run.seed={seed}", *extra]
    defaults = {"setting": setting, "method": method, "seed": seed, "K": scale.K * K_RATIO[setting], "fig4": [],
                "table1": "", "fig5": "", "fig6": False, "bad": ""}
    return RunSpec(name, config, tuple(overrides), {**defaults, **labels})


def _baseline_settings(setting: str, scale: Scale) -> list[str]:
    """The settings whose centralized baseline a run of `setting` is: (a)'s serves (b), (c) (other K) and (f)
    (the 12-party split of the same data, same images per step)."""
    shared = {"a": ["a", "b", "c", "f"]}.get(setting, [setting])
    return [s for s in shared if s in scale.settings]


def study(scale: Scale) -> list[RunSpec]:
    first = scale.seeds[0]
    runs = []
    for setting in scale.settings:
        for seed in (scale.seeds if setting in scale.seeded else (first,)):
            for method in scale.methods:
                if method == "centralized" and setting in ("b", "c", "f"):
                    continue      # the baseline of (a) serves them
                suffix = "" if seed == first else f"-s{seed}"
                fig4 = _baseline_settings(setting, scale) if method == "centralized" else [setting]
                fv = method in FV_METHODS
                runs.append(_spec(setting, method, scale, seed, f"{setting}{suffix}-{method.replace('+', '-')}", [],
                                  fig4=fig4,
                                  table1=TABLE1_MODELS.get(setting, "") if method in TABLE1_STUDY_METHODS else "",
                                  fig5="local" if fv and setting == "a" and seed == first else "",
                                  fig6=fv and seed == first and setting in ("a", "f"),
                                  bad="clean" if method == "fedface" and setting == "a" and seed == first
                                  and scale.bad_party else ""))
    if "a" in scale.settings:
        if scale.moving_norm:
            for method in FV_METHODS:
                runs.append(_spec("a", method, scale, first, f"a-{method.replace('+', '-')}-moving",
                                  ["fv.norm=moving"], fig5="moving"))
        if scale.bad_party:
            runs.append(_spec("a", "fedface", scale, first, f"a-fedface-shuffled-{scale.bad_party}",
                              [f"parties.{scale.bad_party}.data.shuffle_labels=true"], bad="shuffled", fig6=True))
    return sorted(runs, key=lambda run: _priority(run, first))


def _priority(run: RunSpec, first_seed: int) -> int:
    """The order runs go in, so that a study cut short has its most telling runs: (a), the bad party, (a)'s
    second seed, (b), (c), (c)'s second seed, the Moving Norm, (d), (e), (f)."""
    labels = run.labels
    if labels["bad"] == "shuffled":
        return 1
    if labels["fig5"] == "moving":
        return 6
    if labels["setting"] == "a":
        return 0 if labels["seed"] == first_seed else 2
    if labels["setting"] == "c" and labels["seed"] != first_seed:
        return 5
    return {"b": 3, "c": 4, "d": 7, "e": 8, "f": 9}[labels["setting"]]
