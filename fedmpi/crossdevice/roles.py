"""Which cross-device role a rank plays: rank 0 the server (the round loop of fedmpi.core.server with the
cross-device setting), every other rank a trainer of virtual clients."""
from __future__ import annotations

from fedmpi.core.malloc import keep_freed_buffers
from fedmpi.layout import SERVER


def run_cross_device(cfg, ctx, parts, run_dir, resume=None) -> int:
    if parts.device.type == "cpu":
        keep_freed_buffers()
    if ctx.rank == SERVER:
        from fedmpi.crossdevice.setting import run_client_server
        return run_client_server(cfg, ctx, parts, run_dir, resume)
    from fedmpi.crossdevice.trainer import run_client_trainer
    return run_client_trainer(cfg, ctx, parts, run_dir, resume)
