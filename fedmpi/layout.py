"""The rank plan: ranks -> roles. Rank 0 is the server; then each party's trainer ranks in config order; then
dedicated validators. The layout depends on fed.setting: `centralized` merges all parties into one holding the union
of their data (same ranks in all), `solo` keeps one party alone, `federated` keeps every party. Cross-device
runs (clients.population > 0) have one group `clients` of clients.ranks trainer ranks, each training its share
of the sampled clients.

`python -m fedmpi.layout [--config F] [key=val ...]` prints the layout a config needs, as JSON (the Slurm scripts
size their allocation with it); with `--world`, only the number of ranks (what `mpirun -n` takes: `make demo`; the
plan is left to the launch, which states it)."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

from fedmpi.config import Config, ConfigError, DataSpec, fv_runs, load_config
from fedmpi.config.epochs import party_groups, plan_line, rank_batch  # noqa: F401 - rank_batch: fedmpi.layout's too

SERVER = 0


@dataclass(frozen=True)
class Party:
    index: int
    name: str
    ranks: tuple[int, ...]          # world ranks, the first is the party leader
    specs: tuple[DataSpec, ...]     # more than one only for the centralized union

    @property
    def leader(self) -> int:
        return self.ranks[0]


@dataclass(frozen=True)
class Layout:
    parties: tuple[Party, ...]
    validators: tuple[int, ...]     # dedicated validator ranks (empty: hosted on the server)

    @property
    def trainer_ranks(self) -> tuple[int, ...]:
        return tuple(r for p in self.parties for r in p.ranks)

    @property
    def world_size(self) -> int:
        return 1 + len(self.trainer_ranks) + len(self.validators)

    def role(self, rank: int) -> str:
        if rank == SERVER:
            return "server"
        if rank in self.validators:
            return "validator"
        return f"trainer:{self.party_of(rank).name}"

    def party_of(self, rank: int) -> Party:
        for p in self.parties:
            if rank in p.ranks:
                return p
        raise KeyError(f"rank {rank} is not a trainer rank")

    def describe(self) -> str:
        parts = " + ".join(f"{p.name} {len(p.ranks)}" for p in self.parties)
        text = f"1 server + {parts}"
        if self.validators:
            text += f" + {len(self.validators)} validator{'s' if len(self.validators) > 1 else ''}"
        return text

    def as_dict(self) -> dict:
        return {"world": self.world_size, "server": 1,
                "parties": {p.name: len(p.ranks) for p in self.parties},
                "validators": len(self.validators)}


def party_batches(cfg: Config, layout: Layout) -> dict[str, int]:
    """{party: images per step of the whole party}: what its data stream and its gradients depend on, whatever
    the split over its ranks (which a resume may change)."""
    return {p.name: len(p.ranks) * rank_batch(cfg, p.name) for p in layout.parties}


def build_layout(cfg: Config) -> Layout:
    groups = [(name, ranks, specs) for name, ranks, specs, _ in party_groups(cfg)]
    parties, next_rank = [], SERVER + 1
    for i, (name, n, specs) in enumerate(groups):
        parties.append(Party(i, name, tuple(range(next_rank, next_rank + n)), specs))
        next_rank += n
    validators = ()
    if fv_runs(cfg) and cfg.fv.placement == "dedicated":
        validators = tuple(range(next_rank, next_rank + cfg.fv.validators))
    return Layout(tuple(parties), validators)


def check_world_size(layout: Layout, world_size: int) -> None:
    if world_size != layout.world_size:
        raise ConfigError(
            f"world size: this layout needs {layout.world_size} MPI ranks ({layout.describe()}), "
            f"but the job has {world_size}; launch with mpirun -n {layout.world_size} or change "
            f"parties.NAME.ranks")


def main(argv=None) -> int:
    from fedmpi.party_sizes import party_sizes

    parser = argparse.ArgumentParser(prog="python -m fedmpi.layout", description=__doc__)
    parser.add_argument("--config", default=None)
    parser.add_argument("--world", action="store_true", help="print only the number of MPI ranks the config needs")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. fed.K=400")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides, sizes=party_sizes)
        layout = build_layout(cfg)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.world:
        print(layout.world_size, flush=True)
        return 0
    print(json.dumps(layout.as_dict()), flush=True)
    print_plan(cfg, sys.stderr)
    return 0


def print_plan(cfg: Config, stream) -> None:
    """Each party's images, images per step and steps per epoch, and the rounds they make, on `stream` (stderr:
    the JSON on stdout is what scripts read); a party's data that cannot be read here is said, not fatal."""
    if cfg.cross_device:
        return
    from fedmpi.party_sizes import party_sizes

    try:
        sizes = party_sizes(cfg)
    except ConfigError as exc:
        print(f"plan: the parties' images cannot be counted here ({exc})", file=stream)
        return
    for name, (images, step) in sizes.items():
        print(f"  {name}: {images} images, {step} a step, {-(-images // step)} steps an epoch", file=stream)
    print(plan_line(cfg, sizes), file=stream)


if __name__ == "__main__":
    sys.exit(main())
