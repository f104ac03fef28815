"""Entry point: `mpirun -n 17 python -m fedmpi.run [--config F] [key=value ...]`.

Every rank parses the config and checks the layout against the MPI world size before anything else, and its
estimated memory against what its nodes have (fedmpi/memory, run.memory_check); then the
missing synthetic sets are generated (by several ranks at once, fedmpi/data/preparation.py), rank 0 checks and
describes the data, torch.distributed is set up through MPI, and each rank runs its role inside the failure
guard.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import textwrap
from typing import Callable

from fedmpi.comm import control, nodes
from fedmpi.comm.node_share import quiet_open_mpi_windows
from fedmpi.comm.start import start_mpi
from fedmpi.config import ConfigError, load_config, to_yaml
from fedmpi.config.files import check_files
from fedmpi.core import signals
from fedmpi.core.malloc import start_again_tuned
from fedmpi.memory.check import check_memory, short_under_glibc_defaults
from fedmpi.launch_notes import finished, say_plan
from fedmpi.run_folder import choose_run_dir, undo_failed_start
from fedmpi.layout import SERVER, build_layout, check_world_size

USAGE_ERROR = 2


HELP = """Federated face recognition on MPI: rank 0 is the server, the next ranks each party's trainers (a party's
classifier stays with it, sharded over its ranks), then any dedicated validators. Launch it under mpirun, srun or
sbatch with as many ranks as the config's layout needs (`python -m fedmpi.layout --config FILE` says how many).

common launches:
  mpirun -n 5 python -m fedmpi.run --config configs/demo_cpu.yaml          the CPU demo: FedFace on 3 synthetic
                                                                            parties of 2/1/1 ranks (`make demo`)
  mpirun -n 5 python -m fedmpi.run --config configs/demo_cpu.yaml fed.algorithm=fedgc log.name=gc
  mpirun -n 17 python -m fedmpi.run optim.batch_size=8                      the paper's 3-party 8/4/4 layout
  mpirun -n 5 python -m fedmpi.run --config configs/demo_cpu.yaml log.name=gc --resume auto
                                                                            continue a run from its newest checkpoint
  python -m fedmpi.run --print-config fed.algorithm=privacyface             every setting and its value, nothing run
  sbatch slurm/fedface_3party.sh                                            on a Slurm cluster (docs/CLUSTER.md)

main settings (key=value overrides on the defaults or on --config's file; --print-config lists them all):
  fed.algorithm=NAME      {rules}
  fed.options.KEY=VALUE   the rule's own options (docs/BASELINES.md for fedaws, fedgc, privacyface)
  fed.K=N                 local steps per round;  fed.setting=centralized|solo  the single-party baselines
  fv.enabled=true         Federated Validation (FedFace is pfm with it)
  parties=[...]           each party's name, ranks and data (synthetic faces by default, or .rec/.idx folders)
  optim.lr, optim.batch_size, optim.epochs, model.backbone=ir18|ir34|ir50|ir100, model.head=arcface|cosface
  fed.dp.enabled=true, fed.aggregation.rule=median|krum|...  private or robust aggregation
  log.dir, log.name, checkpoint.every=N, eval.every=N, run.device=cpu|cuda

documentation: README.md (quick start, running, algorithms, outputs), docs/ARCHITECTURE.md (how it works),
docs/BASELINES.md (FedAwS, FedGC, PrivacyFace and what leaves a party), docs/READ_A_RUN.md (the run log),
docs/CLUSTER.md (Slurm), docs/WRITE_A_RULE.md (adding a rule)."""


def parse_args(argv):
    from fedmpi.algorithms.registry import RULES

    rules = textwrap.fill("the federated rule (default pfm): " + ", ".join(RULES), width=112, initial_indent=" " * 26,
                          subsequent_indent=" " * 26).lstrip()
    parser = argparse.ArgumentParser(prog="python -m fedmpi.run", description=HELP.format(rules=rules),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=None, help="YAML file (default: the built-in paper settings, "
                                                       "3-party 8/4/4 on synthetic faces)")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("--resume", default=None, metavar="auto|PATH",
                        help="continue the run log.name from its newest complete checkpoint (auto; none: start "
                             "fresh) or from the checkpoint folder PATH; exit status 75 means the run stopped "
                             "for preemption (SIGTERM/SIGUSR1) after writing a checkpoint")
    parser.add_argument("--allow-config-changes", action="store_true",
                        help="with --resume: accept settings that change what the run computes (lr, batch size, "
                             "seed, ...); each change is recorded in the run log (/config, attrs config_changes)")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. fed.K=400 model.backbone=ir34")
    return parser.parse_intermixed_args(argv)  # options may come after the overrides, e.g. `k=v --resume auto`


def party_sizes(cfg) -> dict:
    """The parties' images, read only for `optim.steps_per_epoch: auto`; a missing file is named before the data
    layer (and torch) is imported."""
    check_files(cfg)
    from fedmpi.party_sizes import party_sizes as counted

    return counted(cfg)


def memory_short(argv) -> bool:
    """Whether this launch's nodes are short of memory under glibc's default malloc (core/malloc.py); quietly:
    a problem with the command line or the config is main()'s to report."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            args = parse_args(argv)
            return short_under_glibc_defaults(load_config(args.config, args.overrides, sizes=party_sizes), os.environ)
        except (ConfigError, SystemExit, ValueError):
            return False


def fail(message: str, rank: int) -> int:
    """A problem every rank finds the same way (config, layout): rank 0 says it once, all exit non-zero."""
    if rank == 0:
        print(f"error: {message}", file=sys.stderr, flush=True)
    return USAGE_ERROR


def on_root(mpi, decide: Callable[[], object]):
    """decide() on rank 0 only; every rank gets its result, or the same one-line error. Whatever rank 0 meets
    (a folder it cannot create, an unreadable file) is told to the others, never left for them to wait on."""
    if mpi.Get_rank() == SERVER:
        try:
            decision = (decide(), None)
        except ConfigError as exc:
            decision = (None, str(exc))
        except Exception as exc:  # noqa: BLE001 - the other ranks are waiting in the broadcast below
            decision = (None, f"{type(exc).__name__}: {exc}")
    else:
        decision = None
    # the others nap while rank 0 decides (a blocking mpi4py bcast spins, taking CPU from rank 0)
    value, problem = control.bcast(decision, what="rank 0's launch decision", timeout_s=None, comm=mpi)
    if problem:
        raise ConfigError(problem)
    return value


def abort_launch(mpi, exc: BaseException) -> None:
    """An unexpected failure before the guard: say it in one line and end every rank."""
    sys.stderr.write(f"rank {mpi.Get_rank()} (launch): {type(exc).__name__}: {exc}\n")
    sys.stderr.flush()
    mpi.Abort(1)


def prepare_data(cfg, layout) -> dict:
    """Make sure every party's data is there (generating synthetic sets); describe it for the run log: each party's
    set, the public set every party holds (`data.public`) and the starting model's files (`model.init`: checked
    against the configured model here, one line naming the first key that does not fit)."""
    from fedmpi.data import open_training_set, prepare_training_set
    from fedmpi.models.pretrained import describe_initial_model

    if cfg.cross_device:
        from fedmpi.crossdevice.client_data import cifar_folder
        cifar_folder(cfg)  # the synthetic set is written here when missing; the server logs the partition
        return {}
    description = {}
    for party in layout.parties:
        for i, spec in enumerate(party.specs):
            prepare_training_set(spec, cfg.data)
            key = party.name if len(party.specs) == 1 else f"{party.name}.{i}"
            description[key] = open_training_set(spec, cfg.data).describe()
            if cfg.data.heldout:   # the first of each identity's images are its personalised test images
                description[key]["heldout_per_identity"] = cfg.data.heldout
    public_classes = None
    if cfg.data.public.kind:
        public = open_training_set(cfg.data.public.spec(), cfg.data)
        description["data.public"] = {**public.describe(), "held_by": "every party"}
        public_classes = public.num_classes
    initial = describe_initial_model(cfg, public_classes)
    if initial:
        description["model.init"] = initial
    return description


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signals.install()  # a preemption signal from now on stops the run at a round boundary, with a checkpoint
    quiet_open_mpi_windows()
    MPI = start_mpi()   # returns once every rank has left MPI_Init (fedmpi/comm/start.py says why)

    mpi = MPI.COMM_WORLD  # torch is imported once the launch is accepted: a refused one ends in a blink
    rank = mpi.Get_rank()
    try:
        cfg = load_config(args.config, args.overrides, sizes=party_sizes)
        if args.print_config:
            if rank == 0:
                print(to_yaml(cfg), end="")
            return 0
        layout = build_layout(cfg)
        check_world_size(layout, mpi.Get_size())
        check_files(cfg)   # a missing file is named by its setting before torch is loaded
        places = nodes.survey(mpi)  # every rank's node, local rank and address; a node that cannot take part is named
        check_memory(cfg, layout, mpi, places)  # a layout that cannot fit its nodes' memory ends here, before torch
        run_dir, created = on_root(mpi, lambda: choose_run_dir(cfg, args.resume))
        from fedmpi.store.checkpoint import configure_determinism, find_resume_point
        resume = on_root(mpi, lambda: find_resume_point(args.resume, cfg, layout, run_dir,
                                                        args.allow_config_changes))
    except ConfigError as exc:
        return fail(str(exc), rank)
    except Exception as exc:  # noqa: BLE001 - no rank may be left waiting for one that failed here
        abort_launch(mpi, exc)
    if finished(cfg, resume, run_dir, mpi):
        return 0

    def work() -> int:
        from fedmpi.core.build import build_parts
        from fedmpi.core.context import build_context
        from fedmpi.data.preparation import generate_missing
        from fedmpi.fv.validator import needs_validation_sets, prepare_validation_data

        if not cfg.cross_device:  # the missing synthetic sets, written by several ranks at once
            generate_missing(cfg, layout, mpi, validation=needs_validation_sets(cfg))
        description = prepare_data(cfg, layout) if rank == SERVER else None
        if rank == SERVER:
            say_plan(cfg, layout, description)
            if needs_validation_sets(cfg):   # the validators (and the server's hosted sets) read them after the barrier
                prepare_validation_data(cfg)
        # the others nap while rank 0 writes the data (a blocking MPI barrier spins); rank 0 failing ends the job
        comm.barrier(what="data preparation on rank 0", timeout_s=None)
        configure_determinism(cfg)
        ctx = build_context(cfg, layout)
        parts = build_parts(cfg, ctx.device, ctx.dtype)   # the rule, the model, the aggregator: once per rank
        if cfg.cross_device:
            from fedmpi.crossdevice.roles import run_cross_device
            return run_cross_device(cfg, ctx, parts, run_dir, resume)
        from fedmpi.silo.roles import run_silo
        return run_silo(cfg, ctx, parts, run_dir, description, resume)

    from fedmpi import comm

    cleanup = (lambda: undo_failed_start(run_dir, created)) if rank == SERVER else None
    code = comm.run_guarded(layout.role(rank), work, on_failure=cleanup)
    comm.shutdown()
    return code


if __name__ == "__main__":
    # before torch and MPI start: glibc reads its malloc tunables at a process's start (importing this module
    # starts neither)
    start_again_tuned(lambda: memory_short(sys.argv[1:]))
    status = main()
    signals.ignore()  # the work is done: a launcher's clean-up signal must not replace this exit status
    sys.exit(status)
