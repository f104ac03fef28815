"""The focused alpha = 0 stage of Hsu et al.'s study (`python -m jobs.reproduce hsu-long`, `make hsu-cpu-long`):
the claim the paper is remembered for (FedAvgM keeps 76.9 % where FedAvg has 30.1 % at alpha = 0, Table 1, Sec. 4)
needs more rounds than the full grid of `make hsu-cpu` can afford, so this stage spends its hour on one C and the
two rules that claim compares, at many rounds, with an evaluation every few rounds so that the curves show when
the rules separate. Two stages, as the study it follows:

  tuning   on the tuning seed, each rule (FedAvg; FedAvgM at beta = 0.9) at the eta_eff the 40-round tuning stage
           chose (read from that study's committed logs), at alpha = 0 also at the grid's two neighbouring eta_eff:
           the longer horizon may move the best one;
  seeds    each (rule, alpha) at its best eta_eff of this stage's tuning seed, on the other seeds (paired).

The report is fedmpi/analysis/hsu_long_report.py."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jobs.hsu_study import SCALES as HSU_SCALES, HsuScale, _grid, _spec
from jobs.hsu_sweep import hsu_runs
from jobs.sweep_plans import RunSpec


@dataclass(frozen=True)
class LongScale:
    base: HsuScale                 # the tuning study's scale: its population, data and eta_eff grid
    tuned: str                     # that study's sweep folder, whose tuning seed chose the eta_eff
    rounds: int
    every: int                     # evaluation every this many rounds
    fraction: float
    beta: float
    recheck: tuple[float, ...]     # alpha values whose chosen eta_eff is re-checked with its two grid neighbours
    rationale: str = ""

    @property
    def hsu(self) -> HsuScale:
        """The base scale at this stage's rounds, evaluation, C and beta."""
        common = tuple(o for o in self.base.common if not o.startswith(("clients.rounds=", "eval.every=")))
        return HsuScale(common=(*common, f"clients.rounds={self.rounds}", f"eval.every={self.every}"),
                        alpha=self.base.alpha, fraction=(self.fraction,), beta=(self.beta,),
                        eta_eff=self.base.eta_eff, seeds=self.base.seeds)


CPU_RATIONALE = (
    "The 40-round study (hsu_cpu.md) left every alpha = 0 run within 9 points of chance; its probes left chance only "
    "after round 40. This stage keeps that study's population, data, B and E (M = 100 clients of 20 synthetic "
    "images, B = 10, E = 1, 2 trainer ranks) and spends about 45 minutes of 2 cores on C = 0.1 alone, FedAvg and "
    "FedAvgM beta = 0.9, 300 rounds with an evaluation every 20: a probe of 60 rounds measured 0.40 s a round and "
    "1.8 s an evaluation of the 1000 test images, about 160 s a run with its start, and 16 runs.")

GPU_BASE = HsuScale(
    common=("clients.population=100", "clients.images=500", "clients.train_images=50000", "clients.test_images=10000",
            "optim.batch_size=64", "clients.epochs=1", "clients.ranks=1", "run.device=cuda"),
    alpha=(100.0, 0.0), fraction=(0.1,), beta=(0.9,), eta_eff=(0.01, 0.02, 0.05, 0.1, 0.2), seeds=(0,))
GPU_RATIONALE = (
    "Hsu et al.'s client size on one GPU (jobs/hsu_gpu.py, `make hsu-gpu`): M = 100 clients of 500 synthetic images, "
    "B = 64, E = 1 (8 local steps), C = 0.1, one trainer rank whose round's clients train as one batch "
    "(clients.cohort=auto); each rule at the eta_eff the CPU's long stage chose on its tuning seed (no tuning at "
    "this scale: the 9 minutes hold one seed of the four runs), as many rounds as a probe says fit.")

SCALES = {
    "cpu": LongScale(base=HSU_SCALES["cpu"], tuned="docs/results/hsu-cpu", rounds=300, every=20, fraction=0.1,
                     beta=0.9, recheck=(0.0,), rationale=CPU_RATIONALE),
    "gpu": LongScale(base=GPU_BASE, tuned="docs/results/hsu-cpu-long", rounds=1000, every=100, fraction=0.1,
                     beta=0.9, recheck=(), rationale=GPU_RATIONALE),
    "tiny": LongScale(base=HSU_SCALES["tiny"], tuned="", rounds=4, every=2, fraction=0.5, beta=0.9, recheck=(0.0,),
                      rationale="The smallest long stage that fills every table: a pipeline test, not a result."),
}


def neighbours(grid: tuple[float, ...], value: float) -> tuple[float, ...]:
    """`value` and the grid's values on either side of it (the grid sorted; a value off the grid alone)."""
    ordered = sorted(grid)
    if value not in ordered:
        return (value,)
    i = ordered.index(value)
    return tuple(ordered[max(i - 1, 0):i + 2])


def chosen_eta_eff(folder: str | Path, seed: int, fraction: float, beta: float) -> dict[tuple[str, float], float]:
    """(algorithm, alpha) -> the eta_eff the tuning seed's runs in `folder` chose, at C = fraction, for FedAvg
    and FedAvgM at server momentum beta."""
    from fedmpi.analysis.hsu_results import best_settings, load_results

    chosen = best_settings([r for r in load_results(folder) if r.seed == seed], per_beta=True)
    return {(algorithm, alpha): float(f"{lr / (1 - b):.6g}")
            for (algorithm, b, _, C, alpha), (lr, _) in chosen.items() if C == fraction and b in (0.0, beta)}


def _runs(scale: LongScale, plan: dict[tuple[str, float], tuple[float, ...]], seeds) -> list[RunSpec]:
    hsu, runs = scale.hsu, []
    for (algorithm, alpha), etas in sorted(plan.items()):
        grid = _grid(hsu, alpha=(alpha,), lr=etas, seeds=seeds, algorithms=(algorithm,))
        runs.extend(hsu_runs(grid, _spec(hsu)))
    return runs


def study(scale: LongScale) -> list[RunSpec]:
    """The tuning stage: the chosen eta_eff (with its neighbours where re-checked) on the tuning seed. Without a
    tuned folder (the tiny scale) the grid's first eta_eff stands for the chosen one."""
    base = scale.hsu
    if scale.tuned:
        chosen = chosen_eta_eff(scale.tuned, base.seeds[0], scale.fraction, scale.beta)
    else:
        chosen = {(a, alpha): base.eta_eff[0] for a in base_algorithms() for alpha in base.alpha}
    plan = {key: neighbours(base.eta_eff, eta) if key[1] in scale.recheck else (eta,) for key, eta in chosen.items()}
    return _runs(scale, plan, base.seeds[:1])


def base_algorithms() -> tuple[str, ...]:
    from jobs.hsu_sweep import HsuGrid

    return HsuGrid().algorithms


def follow_up(scale: LongScale, folder: Path) -> list[RunSpec]:
    """The seeds stage: each (rule, alpha) at its best eta_eff of this stage's tuning seed, on the other seeds."""
    base = scale.hsu
    chosen = chosen_eta_eff(folder, base.seeds[0], scale.fraction, scale.beta)
    return _runs(scale, {key: (eta,) for key, eta in chosen.items()}, base.seeds[1:])
