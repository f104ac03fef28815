"""The cross-device setting as the server's round loop takes it (core/seams.py): the clients' data and partition
(CIFAR, or faces: logged in /data), the exchange (sample, reduce, the clients' states), the face clients' class
embeddings (class_rows.py), the run log's extra tables (/clients, /eval, /classes) and the side work (test
accuracy of Θ, or its held-out verification, on the evaluation schedule of every setting, core/schedule.py). The
loop is the one every setting runs."""
from __future__ import annotations

from functools import partial

from fedmpi.core.build import RunParts
from fedmpi.core.context import Context
from fedmpi.crossdevice.class_rows import DeviceKit, WhatLeaves, columns as class_columns
from fedmpi.crossdevice.client_data import open_clients
from fedmpi.crossdevice.client_state import client_store
from fedmpi.crossdevice.evaluation import EVAL_COLUMNS, TestAccuracy
from fedmpi.crossdevice.exchange import ClientExchange, client_group
from fedmpi.crossdevice.face_clients import idle_loss_line
from fedmpi.crossdevice.sampler import ClientSampler
from fedmpi.core.secure_exchange import log_table as secure_log_table, secure_or_plain
from fedmpi.core.secure_uploads import session_line
from fedmpi.core.driver import drive
from fedmpi.core.server import Server
from fedmpi.core.seams import NoClasses
from fedmpi.evaluation.benchmarks import log_columns as benchmark_columns


class CrossDeviceSetting:
    def __init__(self, cfg, ctx: Context, parts: RunParts):
        self.cfg, self.ctx, self.parts = cfg, ctx, parts
        self.data = open_clients(cfg)
        self.uploads = None        # the server's ClientExchange, set by `exchange`
        self.parties = [p.name for p in ctx.layout.parties]     # one row: the sampled clients
        population = len(self.data.parts)
        c = cfg.clients
        self.sampler = ClientSampler(population, c.fraction if population > 1 else 1.0, c.sampler_seed)
        tables = {"clients": {"round": ((), "i8"), "ids": ((self.sampler.count,), "i8")}}
        if cfg.clients.face_clients:    # the held-out pair sets' table, as in the silo runs; the rows' spread
            tables["classes"] = class_columns(parts.rule.classes)
        else:
            tables["eval"] = EVAL_COLUMNS
        self.log_schema = {"val_sets": list(cfg.data.val_sets), "extra_tables": tables,
                           "eval_columns": benchmark_columns(cfg)}     # eval.sets: the face clients' only
        if cfg.fed.secure_aggregation.enabled:     # who missed which stage of the round's session
            tables["secagg"] = secure_log_table(self.sampler.count)
        self.party_tables: dict = {}   # no per-client numbers beyond the round's statistics

    @property
    def data_description(self) -> dict:
        return self.data.description

    def side_work(self, log) -> TestAccuracy:
        if self.cfg.clients.face_clients:
            from fedmpi.crossdevice.face_evaluation import Verification
            return Verification(self, log)
        return TestAccuracy(self, log)

    def exchange(self, log, up_numel: int, down_numel: int, kept: int) -> ClientExchange:
        ctx, parts = self.ctx, self.parts
        trainers = ctx.layout.trainer_ranks
        self.uploads = ClientExchange(trainers, client_group(trainers), ctx.control, self.sampler, self.data.sizes(),
                                      up_numel, parts.device, parts.dtype, log=log,
                                      store=client_store(parts.rule, parts.state.trainable, len(self.data.parts),
                                                         self.data.per_client * self.cfg.model.embedding_size,
                                                         self.cfg.fed.upload_check.norm_ratio),
                                      every_upload=parts.every_upload)
        # under fed.secure_aggregation wrapped by the session that takes the clients' uploads
        return secure_or_plain(self.cfg, self.told_of_idle_loss(self.uploads), up_numel, parts.state.numel, log)

    def told_of_idle_loss(self, exchange: ClientExchange) -> ClientExchange:
        """Face clients: the launch's first round says in one line when their loss is ~0 (face_clients.py)."""
        if self.cfg.clients.face_clients:
            exchange.first_loss_line = partial(idle_loss_line, self.cfg)
        return exchange

    def class_exchange(self, part):
        """The face clients' class embeddings (crossdevice/class_rows.py), the method's class part stepping on
        them; nothing for the CIFAR clients, which keep no classifier of their own (the config refuses a class
        part there)."""
        if not self.cfg.clients.face_clients:
            return NoClasses()
        return part.server_side(DeviceKit(self.uploads.store, self.cfg.model.embedding_size, self.uploads))


def run_client_server(cfg, ctx: Context, parts: RunParts, run_dir, resume=None) -> int:
    if session_line(cfg):
        print(session_line(cfg), flush=True)
    if cfg.clients.face_clients:
        print(parts.rule.classes.party_side(WhatLeaves(cfg)), flush=True)
    server = Server(cfg, parts, CrossDeviceSetting(cfg, ctx, parts), run_dir,
                    resume_round=resume.round if resume else None, config_changes=resume.changes if resume else None)
    return drive(server, cfg, ctx, run_dir, resume)
