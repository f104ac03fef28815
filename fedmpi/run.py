"""Entry point: `mpirun -n 17 python -m fedmpi.run [--config F] [key=value ...]`.

Every rank parses the config and checks the layout against the MPI world size before anything else; then
rank 0 prepares the data (generates the synthetic sets when they are missing), torch.distributed is set up
through MPI, and each rank runs its role inside the failure guard.
"""
from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

from fedmpi import comm
from fedmpi.config import ConfigError, load_config, to_yaml
from fedmpi.topology import SERVER, build_layout, check_world_size

USAGE_ERROR = 2


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m fedmpi.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=None, help="YAML file (default: the built-in paper settings, "
                                                       "3-party 8/4/4 on synthetic faces)")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. fed.K=400 model.backbone=ir34")
    return parser.parse_args(argv)


def fail(message: str, rank: int) -> int:
    """A problem every rank finds the same way (config, layout): rank 0 says it once, all exit non-zero."""
    if rank == 0:
        print(f"error: {message}", file=sys.stderr, flush=True)
    return USAGE_ERROR


def choose_run_dir(cfg, mpi) -> Path:
    if mpi.Get_rank() == SERVER:
        name = cfg.log.name or f"{cfg.fed.algorithm}-{datetime.datetime.now():%Y%m%d-%H%M%S}"
        run_dir = Path(cfg.log.dir) / name
        problem = None
        if (run_dir / "log.h5").exists():
            problem = (f"log.name: {run_dir / 'log.h5'} already exists; choose another log.name "
                       f"(nothing was overwritten)")
        else:
            run_dir.mkdir(parents=True, exist_ok=True)
        decision = (str(run_dir), problem)
    else:
        decision = None
    run_dir, problem = mpi.bcast(decision, root=SERVER)
    if problem:
        raise ConfigError(problem)
    return Path(run_dir)


def prepare_data(cfg, layout) -> dict:
    """Make sure every party's data is there (generating synthetic sets); describe it for the run log."""
    from fedmpi.data import open_training_set, prepare_training_set

    description = {}
    for party in layout.parties:
        for i, spec in enumerate(party.specs):
            prepare_training_set(spec, cfg.data)
            key = party.name if len(party.specs) == 1 else f"{party.name}.{i}"
            description[key] = open_training_set(spec, cfg.data).describe()
    return description


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    mpi = comm.mpi_comm()
    rank = mpi.Get_rank()
    try:
        cfg = load_config(args.config, args.overrides)
        if args.print_config:
            if rank == 0:
                print(to_yaml(cfg), end="")
            return 0
        layout = build_layout(cfg)
        check_world_size(layout, mpi.Get_size())
        run_dir = choose_run_dir(cfg, mpi)
    except ConfigError as exc:
        return fail(str(exc), rank)

    role = layout.role(rank).split(":")[0]

    def work() -> int:
        from fedmpi.roles.context import build_context

        description = prepare_data(cfg, layout) if rank == SERVER else None
        mpi.Barrier()
        ctx = build_context(cfg, layout)
        if role == "server":
            from fedmpi.roles.server import run_server
            return run_server(ctx, run_dir, description)
        if role == "validator":
            from fedmpi.roles.validator import run_validator
            return run_validator(ctx)
        from fedmpi.roles.trainer import run_trainer
        return run_trainer(ctx)

    code = comm.run_guarded(layout.role(rank), work)
    comm.shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())
