"""A bad party against FedAvg, FedFace (PFM + FV) and the robust rules, and the privacy-utility curve of
DP-FedAvg, as one study of runs at a named scale: what `python -m jobs.reproduce badparty --scale SCALE` runs
(does Federated Validation move weight away from a bad party; robust and private aggregation at CPU scale).

The silo runs reuse the FedFace study's shrink of the paper's settings (jobs/fedface_study.py: model, data,
party sizes, 1 rank per party) in the 3-party layout (setting a) and the 12-party one (setting f); one party
is bad: its labels shuffled (`parties.NAME.data.shuffle_labels`) or its update sign-flipped and scaled
(`parties.NAME.attack.scale`), beside clean twins (the same seed, initialisation and data order). Every silo
run logs each party's effective weight per round (`log.influence`). The 10^6-scaled attack (the bad party sends
Θ − 10^6 (θ_i − Θ)) runs against each defence: FV with the server's upload check (its default) and alone (the
check off), the check alone (FedAvg), robust rules alone, DP-FedAvg's clipping, and nothing (FedAvg, the check
off); a run that stops because its global model diverged is a result (state DIVERGED in the index). Labels of
each run in the sweep's index:
  part:    "bad" (a bad party or its clean twin) / "dp" (the privacy-utility curve) / "scaled" (the 10^6 attack)
  layout:  "3" / "12" (silo parties) or "cross-device"
  method:  fedavg | fedface | median | trimmed_mean | krum
  bad:     clean | shuffled | flipped | scaled;  party: the bad party's name
  seed:    run.seed;  z: DP's noise multiplier (0: no DP)
  defence: (part "scaled") the defence's key in BadPartyScale.scaled, defence_label: what the report calls it;
  check:   fed.upload_check.action
"""
from __future__ import annotations

from dataclasses import dataclass, field

from jobs.fedface_study import Scale, scale_overrides
from jobs.hsu_sweep import CONFIG as HSU_CONFIG
from jobs.sweep_plans import METHODS, SETTINGS, RunSpec, method

LAYOUTS = {"3": ("a", "ga"), "12": ("f", "ga_0")}     # layout -> (FedFace study setting, the bad party)
KINDS = ("clean", "shuffled", "flipped")


@dataclass(frozen=True)
class Cell:
    """Runs of the bad-party part: each method x kind of bad party ("clean": the twins) x seed, in a layout."""
    layout: str
    methods: tuple[str, ...]
    kinds: tuple[str, ...]
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class Defence:
    """One defence against the 10^6-scaled attack: a method of the study with extra overrides."""
    method: str                                     # fedavg | fedface | a robust rule of BadPartyScale.rules
    overrides: tuple[str, ...] = ()
    check: str = "exclude"                          # fed.upload_check.action (the label; off is in overrides)
    label: str = ""                                 # what the report calls it
    kind: str = "scaled"                            # the bad party's kind: "clean" for the honest twin


NO_CHECK = ("fed.upload_check.action=off",)


@dataclass(frozen=True)
class BadPartyScale:
    base: Scale                                     # the FedFace study's shrink (model, data, K, schedule)
    fv: tuple[str, ...]                             # FedFace's FV settings (deterministic schedule)
    bad: dict                                       # kind -> overrides, "{party}" standing for the bad party
    rules: dict                                     # robust method -> overrides per layout: {layout: [...]}
    cells: tuple[Cell, ...]
    dp_silo: tuple[float, ...] = ()                 # noise multipliers of the silo curve (FedAvg, 3 parties)
    dp_silo_clip: float = 1.0                       # the silo curve's fixed clipping norm C
    dp_silo_options: tuple[str, ...] = ()
    dp_crossdevice: tuple[float, ...] = ()          # noise multipliers of the cross-device curve
    dp_crossdevice_seeds: dict = field(default_factory=dict)   # z -> more seeds of that cross-device point
    crossdevice: tuple[str, ...] = ()               # the cross-device runs' overrides (Hsu et al.'s CPU grid)
    crossdevice_ranks: int = 1
    common: tuple[str, ...] = ()
    scaled: dict = field(default_factory=dict)      # key -> Defence against the 10^6-scaled attack (3 parties)
    scaled_seeds: tuple[int, ...] = ()
    rationale: str = ""


def _fedavg() -> list[str]:
    return METHODS["fedavg"]


def robust(rule: str, **options) -> dict:
    """A robust rule over FedAvg's local training, its options per layout ({layout: {option: value}})."""
    return {layout: [*_fedavg(), f"fed.aggregation.rule={rule}",
                     *(f"fed.aggregation.{k}={v}" for k, v in options.get(layout, {}).items())]
            for layout in LAYOUTS}


CPU_BASE = Scale(
    K=16, steps=(12, 16, [10]), batch=32,
    parties={"ms1m": (64, 16), "ga": (64, 16), "vgg": (48, 20)},
    margins={"arcface": 0.2, "cosface": 0.14},
    common=("data.image_size=16", "data.workers=0", "data.val_pairs_per_fold=100",
            "data.val_sets=[lfw,cfp_fp,agedb_30]", "model.width=0.25", "model.embedding_size=64", "model.scale=32.0",
            "eval.every=100000", "run.device=cpu", "log.influence=true"))

CPU_RATIONALE = (
    "Chosen from pilots (one seed each) and the earlier FedFace CPU study. The FedFace study's model and data "
    "(IR-18 width 0.25 at 16 px, 64/64/48 identities, batch 32 per party, 1 rank each) with K = 16 local steps and "
    "12 rounds (192 steps, lr x0.1 for the last 2 rounds): at K = 4 the bad party's upload stayed within 1-2 points of "
    "the others on the validation sets (the earlier study's diagnosis), at K = 16 it drifts further in a round. "
    "FV runs the deterministic schedule (fv.iterations_per_round = 2: 22 iterations, the same in every run, so runs "
    "repeat; the adaptive mode completed 12 iterations in 96 rounds), T = 3, phi = 0.2 (the FV test's 0.3 moves w "
    "in 8 iterations; 0.2 with 22), on 100 pairs per fold (500 per set for FV, 500 held out). A 3-iteration pilot "
    "with ga's labels shuffled took w_ga from 0.333 to 0.17 by round 5 and ended at 0.168 (held-out mean 73.3 %), "
    "but cost 200 CPU-s, 3/4 of it FV's scoring on 5 sets; calfw and cplfw stayed near chance there (56.8, 58.4 %) "
    "and carry no signal, so FV and the held-out evaluation use lfw, cfp_fp and agedb_30. The second bad party "
    "trains honestly and sends Theta - 4 (theta_i - Theta) (parties.ga.attack.scale = -4): a FedAvg pilot with it "
    "ended at chance (60.6 % vs ~73 %, the global loss rising after round 7). 12 parties: ga_0 is the bad party, "
    "batch 8 per party (the same images per step). Trimmed mean: beta 0.1 with 12 parties (one trimmed from each end); "
    "with 3 parties any trim is the median, so it is not run there. Krum: f = 0 with 3 parties (n > 2f + 2), f = 1 "
    "with 12. Every method has clean twins in both layouts: what the method costs without a bad party, and (FedFace) the "
    "weight FV gives the same party when it is honest. Privacy: FedAvg's clean 3-party run of "
    "seed 0 is the z = 0 point of the silo curve. The clipping norm is the median update norm, as Andrew et al. "
    "(2021) recommend (their adaptive clipping tracks the gamma = 0.5 quantile; McMahan et al. (2018) tuned a fixed "
    "C), measured on the non-private run: the silo DP runs clip each party's whole update (trainable values and "
    "BatchNorm statistics, what it uploads) to a fixed C = 20, the median of the 36 update norms of FedAvg's clean "
    "3-party run of seed 0 (per-round medians 81, 39, 27, 23, 21, 20, 19, 20, 19, 18, 15, 12 over rounds 1-12; the "
    "trainable values carry 1.2 % of the squared norm, the BatchNorm running statistics the rest). Adaptive "
    "clipping from C = 1 with eta_C = 0.2 (an earlier session's runs) moves C by at most exp(0.2 x 0.5) = 1.105 a "
    "round, so it reached 3.0, not 20, in 12 rounds and clipped every update (69 % at negligible noise). "
    "Cross-device (Hsu et al.'s CPU recipe: 40 clients of 50 images, 10 a round, 20 rounds, FedAvg lr 0.05, "
    "alpha 100; a CNN without BatchNorm) clips each client's update to a fixed C = 0.17, the median client update "
    "norm of the non-private run (0.167-0.177 over its first 4 rounds), as adaptive clipping is built for silo "
    "parties only. Noise multipliers reach single-digit epsilon at delta 1e-5: z = 2 over 12 silo rounds (9.0), "
    "z = 1 and 3 over 20 cross-device rounds at q = 0.25 (9.1, 1.8); z = 0.5 and 0.7 (32, 17) resolve where "
    "the cross-device curve falls between z = 0.3 (95) and 1 (9.1). A cross-device run's final accuracy moves by up "
    "to 9 points when only its floating-point rounding changes (the same commit on another machine), so the "
    "points without noise that matters (z = 0, 0.003) and z = 0.3 run 3 seeds.")

SCALES = {
    "cpu": BadPartyScale(
        base=CPU_BASE,
        fv=("fv.iterations_per_round=2", "fv.T=3", "fv.phi=0.2"),
        bad={"shuffled": ("parties.{party}.data.shuffle_labels=true",),
             "flipped": ("parties.{party}.attack.scale=-4",), "scaled": ("parties.{party}.attack.scale=-1e6",)},
        rules={"median": robust("median"), "trimmed_mean": robust("trimmed_mean", **{"12": {"beta": 0.1}}),
               "krum": robust("krum", **{"3": {"f": 0}, "12": {"f": 1}})},
        scaled={"fedface": Defence("fedface", label="FV + the upload check"),
                "fedface-nocheck": Defence("fedface", NO_CHECK, "off", "FV alone"),
                "fedavg": Defence("fedavg", label="the upload check alone"),
                "median-nocheck": Defence("median", NO_CHECK, "off", "FedMedian alone"),
                "krum-nocheck": Defence("krum", NO_CHECK, "off", "Krum alone"),
                "dp": Defence("fedavg", ("fed.dp.enabled=true", "fed.dp.noise_multiplier=0.003", "fed.dp.clip=20.0"),
                              label="DP-FedAvg's clipping (C = 20, z = 0.003)"),
                "fedavg-nocheck": Defence("fedavg", NO_CHECK, "off", "none (FedAvg, the check off)"),
                "honest": Defence("fedface", label="no attack (FedFace): the honest parties' norms", kind="clean")},
        scaled_seeds=(0, 1),
        cells=(Cell("3", ("fedavg", "fedface"), KINDS, (0, 1, 2)),
               Cell("3", ("median", "krum"), KINDS, (0, 1)),
               Cell("12", ("fedavg", "fedface", "median", "trimmed_mean", "krum"), ("shuffled", "flipped"), (0, 1)),
               Cell("12", ("fedavg", "fedface", "median", "trimmed_mean", "krum"), ("clean",), (0, 1))),
        dp_silo=(0.0003, 0.003, 0.03, 0.3, 2.0),
        dp_silo_clip=20.0,
        dp_crossdevice=(0.003, 0.03, 0.3, 0.5, 0.7, 1.0, 3.0),
        dp_crossdevice_seeds={0.0: (1, 2), 0.003: (1, 2), 0.3: (1, 2)},
        crossdevice=("fed.algorithm=fedavg", "clients.population=40", "clients.fraction=0.25", "clients.images=50",
                     "clients.alpha=100", "clients.epochs=1", "optim.batch_size=10", "optim.lr=0.05",
                     "clients.train_images=2000", "clients.test_images=1000", "clients.rounds=20",
                     "eval.every=10", "run.device=cpu", "fed.dp.clip=0.17"),
        rationale=CPU_RATIONALE),
    "tiny": BadPartyScale(
        base=Scale(K=2, steps=(2, 2, []), batch=8, parties={"ms1m": (8, 4), "ga": (8, 4), "vgg": (8, 4)},
                   common=("data.image_size=16", "data.workers=0", "data.val_pairs_per_fold=10", "model.width=0.125",
                           "model.embedding_size=16", "model.scale=16.0", "model.margin=0.1", "eval.every=100000",
                           "run.device=cpu", "log.influence=true")),
        fv=("fv.iterations_per_round=1", "fv.T=3", "fv.phi=0.3"),
        bad={"shuffled": ("parties.{party}.data.shuffle_labels=true",),
             "flipped": ("parties.{party}.attack.scale=-4",)},
        rules={"median": robust("median"), "krum": robust("krum", **{"3": {"f": 0}, "12": {"f": 1}})},
        cells=(Cell("3", ("fedavg", "fedface"), KINDS, (0,)), Cell("3", ("median",), ("flipped",), (0,))),
        dp_silo=(0.3,), dp_silo_clip=0.5, dp_crossdevice=(0.3,),
        crossdevice=("fed.algorithm=fedavg", "clients.population=4", "clients.fraction=0.5", "clients.images=10",
                     "clients.epochs=1", "optim.batch_size=5", "optim.lr=0.05", "clients.train_images=40",
                     "clients.test_images=20", "clients.rounds=2", "eval.every=1", "run.device=cpu",
                     "fed.dp.clip=1.0"),
        rationale="The smallest study that fills every table: a pipeline test, not a result."),
}


def _silo(scale: BadPartyScale, layout: str, name: str, how: str, kind: str, seed: int, extra=(), **labels) -> RunSpec:
    setting, party = LAYOUTS[layout]
    config, base = SETTINGS[setting]
    how_overrides = ([*METHODS["fedface"], *scale.fv] if how == "fedface" else
                     _fedavg() if how == "fedavg" else scale.rules[how][layout])
    bad = [o.format(party=party) for o in scale.bad.get(kind, ())]
    overrides = [*base, *how_overrides, *scale_overrides(scale.base, config, setting), *scale.common, *bad,
                 f"run.seed={seed}", *extra]
    return RunSpec(name, config, tuple(overrides),
                   {"part": "bad", "layout": layout, "method": how, "bad": kind, "party": party, "seed": seed,
                    "z": 0.0, **labels})


def bad_party_runs(scale: BadPartyScale) -> list[RunSpec]:
    return [_silo(scale, cell.layout, f"p{cell.layout}-{how.replace('_', '')}-{kind}-s{seed}", how, kind, seed)
            for cell in scale.cells for how in cell.methods for kind in cell.kinds for seed in cell.seeds]


def dp_runs(scale: BadPartyScale) -> list[RunSpec]:
    """The privacy-utility curve: FedAvg in the 3-party silo layout (the clean FedAvg run of seed 0 is its z = 0
    point, with its seeds) and in the cross-device setting (its own z = 0 run; `dp_crossdevice_seeds` repeats points
    with more seeds)."""
    first = scale.cells[0].seeds[0]
    runs = [_silo(scale, "3", f"dp-silo-C{scale.dp_silo_clip:g}-z{z:g}", "fedavg", "clean", first,
                  ["fed.dp.enabled=true", f"fed.dp.noise_multiplier={z}", f"fed.dp.clip={scale.dp_silo_clip}",
                   *scale.dp_silo_options], part="dp", z=float(z)) for z in scale.dp_silo]
    for z in (0.0, *scale.dp_crossdevice):
        dp = ["fed.dp.enabled=true", f"fed.dp.noise_multiplier={z}"] if z else []
        for seed in (first, *scale.dp_crossdevice_seeds.get(z, ())):
            cross = [*scale.crossdevice, f"clients.ranks={scale.crossdevice_ranks}", f"run.seed={seed}"]
            runs.append(RunSpec(f"dp-cross-z{z:g}" + (f"-s{seed}" if seed != first else ""), HSU_CONFIG,
                                tuple([*cross, *dp]), {"part": "dp", "layout": "cross-device", "method": "fedavg",
                                                       "bad": "clean", "party": "", "seed": seed, "z": float(z)}))
    return runs


def scaled_attack_runs(scale: BadPartyScale) -> list[RunSpec]:
    """The 10^6-scaled attack on ga among 3 parties, against each defence of `scale.scaled` (and its honest twin,
    whose update norms say what the check's norm_ratio must leave room for), seed by seed."""
    return [_silo(scale, "3", f"p3-{key}-{defence.kind}-s{seed}", defence.method, defence.kind, seed,
                  defence.overrides,
                  part="scaled", defence=key, defence_label=defence.label, check=defence.check,
                  z=next((float(o.split("=")[1]) for o in defence.overrides if "noise_multiplier" in o), 0.0))
            for seed in scale.scaled_seeds for key, defence in scale.scaled.items()]


def study(scale: BadPartyScale) -> list[RunSpec]:
    return sorted([*bad_party_runs(scale), *dp_runs(scale), *scaled_attack_runs(scale)], key=_priority)


def _priority(run: RunSpec) -> tuple:
    """The order runs go in, so that a study cut short has its most telling runs: 3 parties with FedAvg and
    FedFace seed by seed, the robust rules, the privacy-utility curve, the 10^6-scaled attack against each
    defence, 12 parties without FedFace (the
    flipped update first: a shuffled party among 12 moves FedAvg little), then FedFace among 12 parties (its FV
    costs most)."""
    labels = run.labels
    rank = {"fedface": 0, "fedavg": 1, "median": 2, "krum": 3, "trimmed_mean": 4}.get(labels["method"], 5)
    kind = {"shuffled": 0, "flipped": 1, "clean": 2, "scaled": 3}[labels["bad"]]
    if labels["part"] == "dp":
        return (2.5, labels["layout"], labels["z"])
    if labels["part"] == "scaled":
        return (2.7, labels["seed"], rank, labels["defence"])
    if labels["layout"] == "3":
        return (0 if rank <= 1 else 2, labels["seed"], rank, kind)
    return (5 if rank == 0 else 3, -kind, labels["seed"], rank)
