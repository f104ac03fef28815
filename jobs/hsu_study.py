"""Hsu et al.'s claims (Table 1, Sec. 4, Fig. 5) as one study at a named scale: what `python -m jobs.reproduce hsu
--scale SCALE` (`make hsu-cpu`) runs, in two stages, as the paper tunes and then reports:

  tuning   every (rule, beta) x C x alpha at every eta_eff of the scale's grid, on the tuning seed: FedAvg at client
           lr eta_eff, FedAvgM at client lr eta_eff (1 - beta) for each beta (jobs/hsu_sweep.py, --equal-eta-eff);
  seeds    each (rule, beta, C, alpha) once more at its best eta_eff of the tuning seed, on the other seeds.

A seed is a population seed: the partition, the client sampling and the model initialisation together, so that
FedAvg and FedAvgM of one seed see the same clients in the same rounds from the same start (paired). The runs'
labels are those of the hsu sweep (fedmpi/analysis/hsu_results.py reads them); the report is
fedmpi/analysis/hsu_report.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jobs.hsu_sweep import HsuGrid, hsu_runs
from jobs.sweep_plans import RunSpec


@dataclass(frozen=True)
class HsuScale:
    common: tuple[str, ...]            # overrides of every run: the population, the data, the rounds
    alpha: tuple[float, ...]
    fraction: tuple[float, ...]
    beta: tuple[float, ...]            # FedAvgM's server momentum values (FedAvg is beta = 0)
    eta_eff: tuple[float, ...]         # the tuning grid of eta / (1 - beta)
    seeds: tuple[int, ...]             # the first is the tuning seed
    rationale: str = ""


CPU_RATIONALE = (
    "The setting was chosen with in-process probes (the same trainer and server step, 100 rounds, seed 0) so that "
    "the paper's effects can show within 60 minutes of 2 cores: M = 100 clients of 20 synthetic images (Hsu et al.: "
    "100 x 500), B = 10 and E = 1 (2 local steps a round; the paper's 500 / 64 gives 8), C = 0.05 and 0.1 (5 and "
    "10 clients a round, as the paper's two smallest C), 40 rounds (the paper: 10,000), every run on 2 trainer "
    "ranks. At 100 rounds the probes gave FedAvg 0.73 at alpha = 100 and chance at alpha = 0 (at client lr 0.05, "
    "0.01 and 0.002), FedAvgM (beta = 0.9, eta_eff = 0.05) 0.90 and 0.26: the synthetic set is learnt within the "
    "budget where clients are alike, and one-class clients are what makes it hard, so its generator was left as "
    "it is (version 1). The eta_eff grid brackets the probes' best values by a factor 2-4 each way. alpha is 100 and "
    "0 only (no alpha = 1) and the rounds 40: the 84 runs then take about 40 minutes of 2 cores, which a machine "
    "shared with other studies through the lock stretches to about twice that.")

SCALES = {
    "cpu": HsuScale(
        common=("clients.population=100", "clients.images=20", "clients.train_images=2000",
                "clients.test_images=1000", "optim.batch_size=10", "clients.epochs=1", "clients.rounds=40",
                "eval.every=40", "clients.ranks=2", "run.device=cpu"),
        alpha=(100.0, 0.0), fraction=(0.1, 0.05), beta=(0.9, 0.97),
        eta_eff=(0.01, 0.02, 0.05, 0.1, 0.2), seeds=(0, 1, 2), rationale=CPU_RATIONALE),
    "tiny": HsuScale(
        common=("clients.population=4", "clients.images=10", "clients.train_images=100", "clients.test_images=20",
                "optim.batch_size=5", "clients.epochs=1", "clients.rounds=2", "eval.every=2", "clients.ranks=1",
                "run.device=cpu"),
        alpha=(100.0, 0.0), fraction=(0.5,), beta=(0.9,), eta_eff=(0.05, 0.1), seeds=(0, 1),
        rationale="The smallest study that fills every table: a pipeline test, not a result."),
}


def _grid(scale: HsuScale, **values) -> HsuGrid:
    return HsuGrid(**{"alpha": scale.alpha, "fraction": scale.fraction, "epochs": (1,), "lr": scale.eta_eff,
                      "seeds": scale.seeds[:1], "beta": scale.beta, **values}, equal_eta_eff=True)


def _spec(scale: HsuScale):
    return lambda name, config, overrides, labels: RunSpec(name, config, (*overrides, *scale.common), labels)


def study(scale: HsuScale) -> list[RunSpec]:
    """The tuning stage: every cell at every eta_eff, on the tuning seed."""
    return hsu_runs(_grid(scale), _spec(scale))


def follow_up(scale: HsuScale, folder: Path) -> list[RunSpec]:
    """The seeds stage: each cell at its best eta_eff of the tuning stage's completed runs, on the other seeds."""
    from fedmpi.analysis.hsu_results import best_settings, load_results

    chosen = best_settings([r for r in load_results(folder) if r.seed == scale.seeds[0]], per_beta=True)
    runs = []
    for (algorithm, beta, _, C, alpha), (lr, _) in sorted(chosen.items()):
        eta_eff = float(f"{lr / (1 - beta):.6g}")
        grid = _grid(scale, alpha=(alpha,), fraction=(C,), lr=(eta_eff,), seeds=scale.seeds[1:],
                     beta=(beta,) if beta else scale.beta, algorithms=(algorithm,))
        runs.extend(hsu_runs(grid, _spec(scale)))
    return runs
