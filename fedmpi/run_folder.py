"""The run folder a launch writes (rank 0): log.dir/log.name, refusing to overwrite a finished run's log, and
removed again when the launch fails before its first round."""
from __future__ import annotations

import datetime
from pathlib import Path

from fedmpi.config import ConfigError


def choose_run_dir(cfg, resume: str | None = None) -> tuple[Path, bool]:
    """The run folder (rank 0) and whether this launch created it."""
    from fedmpi.algorithms.registry import method_key

    method = method_key(cfg.fed.algorithm, cfg.fed.setting).replace(" ", "-")   # 'pfm', 'centralized-pfm'
    name = cfg.log.name or f"{method}-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    run_dir = Path(cfg.log.dir) / name
    if resume is not None and not cfg.log.name:
        raise ConfigError("--resume needs log.name: set log.name=NAME to the run folder to continue (under log.dir)")
    if resume is None and (run_dir / "log.h5").exists():
        raise ConfigError(f"log.name: {run_dir / 'log.h5'} already exists; choose another log.name, or continue "
                          f"that run with --resume auto (nothing was overwritten)")
    existed = run_dir.is_dir()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"log.dir: cannot create the run folder {run_dir} ({exc.strerror or exc})") from None
    return run_dir, not existed


def undo_failed_start(run_dir: Path, created: bool) -> None:
    """On rank 0 when the launch fails before its first round is logged: remove the log it began and the run
    folder it created (if nothing else is in it), so the name can be used again."""
    from fedmpi.store.h5log import starting_name

    starting_name(run_dir / "log.h5").unlink(missing_ok=True)
    if created:
        try:
            run_dir.rmdir()
        except OSError:
            pass  # something else is in it: leave it
