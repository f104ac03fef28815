"""Hsu et al.'s grid (Sec. 4, Table 1 and Fig. 4-5) as a list of runs of configs/hsu_cifar10.yaml:
alpha x C x E x client lr x population seed, FedAvg, and FedAvgM for each server momentum beta > 0.
Every dimension is reducible from the command line (`python -m jobs.sweep hsu --alpha 100,0 --lr 0.01 ...`);
a seed sets the partition, the sampler and the model initialisation together (a "population seed")."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from fedmpi.algorithms.registry import PAPERS, RULES, rule

CONFIG = "configs/hsu_cifar10.yaml"


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(v) for v in text.split(",") if v)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v)


def _names(text: str) -> tuple[str, ...]:
    return tuple(v for v in text.split(",") if v)


@dataclass(frozen=True)
class HsuGrid:
    alpha: tuple[float, ...] = (100.0, 10.0, 1.0, 0.5, 0.2, 0.1, 0.05, 0.0)
    fraction: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4)
    epochs: tuple[int, ...] = (1, 5)
    lr: tuple[float, ...] = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    beta: tuple[float, ...] = (0.7, 0.9, 0.97, 0.99, 0.997)     # server momentum rules' (FedAvgM); FedAvg is 0
    algorithms: tuple[str, ...] = PAPERS["hsu"]    # FedAvg, FedAvgM
    equal_eta_eff: bool = False   # lr values are eta_eff: a server-momentum rule's client lr is eta_eff (1 - beta)


PARSERS = {"alpha": _floats, "fraction": _floats, "epochs": _ints, "lr": _floats, "seeds": _ints, "beta": _floats,
           "algorithms": _names}


def add_grid_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("hsu grid (comma-separated values; default: the paper's)")
    for name in PARSERS:
        group.add_argument(f"--{name}", default=None, metavar="V,V,..", help=f"default {getattr(HsuGrid(), name)}")
    group.add_argument("--equal-eta-eff", action="store_true",
                       help="read --lr as eta_eff = eta / (1 - beta): FedAvgM runs at client lr eta_eff (1 - beta), "
                            "so that every FedAvgM run has a FedAvg twin at the same eta_eff")


def grid_from_args(args) -> HsuGrid | None:
    """The grid the flags ask for (None when no grid flag is given)."""
    given = {name: getattr(args, name) for name in PARSERS if getattr(args, name, None) is not None}
    if not given:
        if getattr(args, "equal_eta_eff", False):
            raise ValueError("--equal-eta-eff: give the grid (at least --lr) with it")
        return None
    try:
        values = {name: PARSERS[name](text) for name, text in given.items()}
    except ValueError as exc:
        raise ValueError(f"hsu grid: {exc}") from None
    empty = [name for name, v in values.items() if not v]
    if empty:
        raise ValueError(f"--{empty[0]}: give at least one value")
    unknown = set(values.get("algorithms", ())) - set(RULES)
    if unknown:
        raise ValueError(f"--algorithms: {', '.join(sorted(unknown))} (known: {', '.join(RULES)})")
    return HsuGrid(**values, equal_eta_eff=bool(getattr(args, "equal_eta_eff", False)))


def _server_momentum(algorithm: str) -> bool:
    """Whether the rule's server step is momentum (FedAvgM): then beta is a grid dimension."""
    return rule(algorithm).server_optimizer == "momentum"


def _label(value: float) -> str:
    return f"{value:g}"


def hsu_runs(grid: HsuGrid | None, spec):
    """RunSpec per grid point; labels carry the values (fedmpi.analysis.hsu_table reads them from the sweep's index)."""
    grid = grid or HsuGrid()
    runs = []
    for algorithm in grid.algorithms:
        for beta in (grid.beta if _server_momentum(algorithm) else (0.0,)):
            for E in grid.epochs:
                for C in grid.fraction:
                    for alpha in grid.alpha:
                        for eta in grid.lr:
                            lr = float(f"{eta * (1 - beta):.6g}") if grid.equal_eta_eff else eta
                            for seed in grid.seeds:
                                name = (f"{algorithm}-b{_label(beta)}-E{E}-C{_label(C)}-a{_label(alpha)}-"
                                        f"lr{_label(lr)}-s{seed}")
                                overrides = [f"fed.algorithm={algorithm}", f"clients.epochs={E}",
                                             f"clients.fraction={C}", f"clients.alpha={alpha}", f"optim.lr={lr}",
                                             f"clients.partition_seed={seed}", f"clients.sampler_seed={seed}",
                                             f"run.seed={seed}"]
                                if _server_momentum(algorithm):
                                    overrides.append(f"fed.server.momentum={beta}")
                                runs.append(spec(name, CONFIG, tuple(overrides),
                                                 {"algorithm": algorithm, "beta": beta, "epochs": E, "fraction": C,
                                                  "alpha": alpha, "lr": lr, "seed": seed}))
    return runs

