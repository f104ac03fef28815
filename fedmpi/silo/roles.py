"""Which silo role a rank plays: rank 0 the server (the round loop with the silo setting), then the parties'
trainer ranks, then the dedicated validators (fv.placement=dedicated)."""
from __future__ import annotations

from fedmpi.layout import SERVER


def run_silo(cfg, ctx, parts, run_dir, data_description: dict | None, resume=None) -> int:
    if ctx.rank == SERVER:
        from fedmpi.silo.setting import run_silo_server
        return run_silo_server(cfg, ctx, parts, run_dir, data_description, resume=resume)
    if ctx.rank in ctx.layout.validators:
        from fedmpi.fv.validator import run_validator
        return run_validator(cfg, ctx, parts)
    from fedmpi.silo.trainer import run_trainer
    return run_trainer(cfg, ctx, parts, run_dir, resume=resume)
