"""The silo setting as the server's round loop takes it (core/seams.py): the parties' exchange (gather of every
leader's upload, broadcast of the global payload), the side work (held-out evaluation, the large-scale
benchmarks and Federated Validation) and the log's FV and evaluation tables."""
from __future__ import annotations

import torch

from fedmpi.comm.node_share import shared_parties
from fedmpi.config import Config, fv_runs
from fedmpi.core.build import RunParts
from fedmpi.core.context import Context
from fedmpi.core.driver import drive
from fedmpi.core.server import Server
from fedmpi.fv import needs_validation_sets
from fedmpi.fv.validator_client import ValidatorPool
from fedmpi.layout import Layout, party_batches
from fedmpi.metrics.personal import personal_columns
from fedmpi.silo.classes import party_rows
from fedmpi.evaluation.benchmarks import Benchmarks, log_columns as benchmark_columns
from fedmpi.silo.exchange import SiloExchange, intra_receivers
from fedmpi.core.secure_exchange import secure_or_plain
from fedmpi.core.secure_uploads import session_line
from fedmpi.core.what_leaves import leaves, line as what_leaves
from fedmpi.silo.server_classes import ServerKit
from fedmpi.silo.side_work import SideWork


def initial_weights(cfg: Config, layout: Layout) -> torch.Tensor:
    """w at the start: uniform, or proportional to each party's batch per step (ranks x batch per rank, which a
    resume on other rank counts keeps)."""
    sizes = torch.tensor(list(party_batches(cfg, layout).values()), dtype=torch.float64)
    w = torch.ones_like(sizes) if cfg.fed.weighting == "uniform" else sizes
    return w / w.sum()


class SiloSetting:
    def __init__(self, cfg: Config, ctx: Context, parts: RunParts, data_description: dict):
        self.cfg, self.ctx, self.parts = cfg, ctx, parts
        self.parties = [p.name for p in ctx.layout.parties]
        self.data_description = data_description
        rule = parts.rule
        self.log_schema = {"val_sets": list(cfg.data.val_sets), "fv_candidates": cfg.fv.T if fv_runs(cfg) else 0,
                           "eval_columns": benchmark_columns(cfg), "attrs": {"leaves_party": leaves(cfg, rule.leaves_party)}}
        self.party_tables = party_tables(cfg, rule)
        P = len(self.parties)
        self.log_schema["extra_tables"] = {table: {"round": ((), "i8"), **{c: ((P,), "f8") for c in columns}}
                                           for table, columns in self.party_tables.items()}
        if rule.classes.columns:
            self.log_schema["extra_tables"]["classes"] = rule.classes.columns

    def side_work(self, log) -> SideWork:
        cfg, ctx = self.cfg, self.ctx
        pool = (ValidatorPool.build(cfg, ctx.layout.validators, ctx.groups.validators, self.parts)
                if needs_validation_sets(cfg) else None)
        benchmarks = Benchmarks.build(cfg, self.parts) if cfg.eval.every > 0 else None
        return SideWork(cfg, log, self.parties, initial_weights(cfg, ctx.layout), pool, benchmarks, ctx.device)

    def exchange(self, log, up_numel: int, down_numel: int, kept: int):
        """The parties' exchange; under fed.secure_aggregation wrapped by the session that takes the uploads."""
        ctx = self.ctx
        shared = shared_parties(ctx.layout, ctx.shares)
        plain = SiloExchange(ctx.layout.parties, ctx.groups.leaders, ctx.control, up_numel, down_numel, ctx.device,
                             ctx.dtype, kept=kept, intra_receivers=intra_receivers(ctx.layout.parties, shared),
                             columns=self.parts.rule.training.upload_columns)
        return secure_or_plain(self.cfg, plain, up_numel, self.parts.state.numel)

    def class_exchange(self, part):
        """The class part's server-side transport (silo/server_classes.py)."""
        ctx, cfg = self.ctx, self.cfg
        parties = list(ctx.layout.parties)
        return part.server_side(ServerKit(parties, party_rows(self.data_description, parties), cfg.model.embedding_size,
                                          ctx.groups.leaders, ctx.device, ctx.dtype, cfg.model.classifier,
                                          cfg.fed.upload_check.norm_ratio))


def party_tables(cfg: Config, rule) -> dict[str, list[str]]:
    """The log's tables of the parties' own numbers per round: `local` (a local objective's round: FedFR's hard
    negatives, combined set, epochs, steps, and the seconds its round's preparation took) and `personal` (the
    personalised evaluation's metrics, in the rounds it ran; data.heldout > 0)."""
    tables = {}
    if rule.training.columns:
        tables["local"] = [*rule.training.columns, "begin_round_s"]
    if cfg.data.heldout:
        tables["personal"] = personal_columns(cfg.eval.personal_fars)
    return tables


def run_silo_server(cfg: Config, ctx: Context, parts: RunParts, run_dir, data_description: dict, resume=None) -> int:
    print(what_leaves(cfg, parts.rule.leaves_party), flush=True)
    for note in (session_line(cfg), upload_check_note(cfg)):
        if note:
            print(note, flush=True)
    server = Server(cfg, parts, SiloSetting(cfg, ctx, parts, data_description), run_dir,
                    resume_round=resume.round if resume else None, config_changes=resume.changes if resume else None)
    return drive(server, cfg, ctx, run_dir, resume)


def upload_check_note(cfg) -> str | None:
    """Why the upload check is not run under secure aggregation, and what bounds a party's upload instead, or
    None."""
    s = cfg.fed.secure_aggregation
    if not s.enabled or cfg.fed.upload_check.action == "off":
        return None
    return (f"note: fed.upload_check needs each upload, which secure aggregation hides: not run; each party clips "
            f"every entry of its weighted update to ±{s.clipping_range:g} (fed.secure_aggregation.clipping_range) "
            f"before encoding, which bounds what one party can add")
