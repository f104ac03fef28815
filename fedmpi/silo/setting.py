"""The silo setting as the server's round loop takes it (core/seams.py): the IResNet backbone, the parties'
exchange (gather of every leader's upload, broadcast of the global payload), the side work (held-out evaluation,
the large-scale benchmarks and Federated Validation) and the log's FV and evaluation tables."""
from __future__ import annotations

import torch

from fedmpi.layout import Layout
from fedmpi.config import Config
from fedmpi.core.context import Context
from fedmpi.core.driver import drive
from fedmpi.core.server import Server
from fedmpi.config import fv_runs
from fedmpi.models.backbone import build_backbone
from fedmpi.silo.benchmarks import log_columns as benchmark_columns
from fedmpi.silo.exchange import SiloExchange
from fedmpi.silo.side_work import SideWork


def initial_weights(cfg: Config, layout: Layout) -> torch.Tensor:
    """w at the start: uniform, or proportional to each party's batch per step (ranks x batch per rank, which a
    resume on other rank counts keeps)."""
    from fedmpi.relayout.batch import party_batches

    sizes = torch.tensor(list(party_batches(cfg, layout).values()), dtype=torch.float64)
    w = torch.ones_like(sizes) if cfg.fed.weighting == "uniform" else sizes
    return w / w.sum()


class SiloSetting:
    def __init__(self, ctx: Context, data_description: dict):
        cfg = ctx.cfg
        self.ctx = ctx
        self.model = build_backbone(cfg, ctx.device, ctx.dtype)
        self.parties = [p.name for p in ctx.layout.parties]
        self.data_description = data_description
        self.log_schema = {"val_sets": list(cfg.data.val_sets), "fv_candidates": cfg.fv.T if fv_runs(cfg) else 0,
                           "eval_columns": benchmark_columns(cfg)}

    def side_work(self, server) -> SideWork:
        return SideWork(self.ctx, server.log, self.parties, initial_weights(self.ctx.cfg, self.ctx.layout))

    def exchange(self, server) -> SiloExchange:
        return SiloExchange(self.ctx, server.up_numel, server.down.flat.numel(),
                            kept=server.side.uploads_kept)


def run_silo_server(ctx: Context, run_dir, data_description: dict, resume=None) -> int:
    server = Server(ctx, run_dir, SiloSetting(ctx, data_description), resume_round=resume.round if resume else None,
                    config_changes=resume.changes if resume else None)
    return drive(server, ctx, run_dir, resume)
