"""The server rank: the round loop. It holds the global payload (Θ and the rule's down payloads) and the
rule's server state; each round it receives the uploads through its exchange, weights them (FV or fixed w),
aggregates, steps the server optimizer, sends the new global payload, logs, does its side work and
checkpoints. See docs/ARCHITECTURE.md, "The round loop and its exchange"."""
from __future__ import annotations

import time

import numpy as np
import torch

from fedmpi import comm
from fedmpi.aggregation.aggregators import check_exchange
from fedmpi.aggregation.server_step import ServerStep
from fedmpi.algorithms import method_key
from fedmpi.algorithms.build import build_algorithm
from fedmpi.config import to_yaml
from fedmpi.fv import fv_runs
from fedmpi.roles import signals
from fedmpi.roles.benchmarks import log_columns as benchmark_columns
from fedmpi.roles.context import BackboneState, Context, build_backbone, drive, initial_weights
from fedmpi.roles.exchange import Payloads, SiloExchange
from fedmpi.roles.progress import Progress
from fedmpi.roles.side_work import SideWork
from fedmpi.store.checkpoint import SERVER_PART, Checkpointer, capture_rng, copy_into, read_part, restore_rng
from fedmpi.store.h5log import RunLog


class Server:
    def __init__(self, ctx: Context, run_dir, data_description: dict, resume_round: int | None = None,
                 exchange=None, config_changes: dict | None = None, setting=None):
        """`setting`: another model, exchange, side work and log tables for the same loop (the cross-device
        simulation, fedmpi.crossdevice.setting); None: the silo parties."""
        self.ctx = ctx
        cfg = ctx.cfg
        self.backbone = setting.model if setting is not None else build_backbone(cfg, ctx.device, ctx.dtype)
        self.state = BackboneState(self.backbone)
        self.algorithm = build_algorithm(cfg)
        self.down = Payloads(self.state, self.algorithm.down, ctx.device, ctx.dtype)
        self.mean = Payloads(self.state, self.algorithm.up, ctx.device, ctx.dtype)
        self.theta = self.down.theta
        self.state.read(self.theta)
        self.algo_state = self.algorithm.init_server_state(self.down.trainable, self.down.extra)
        self.parties = [p.name for p in ctx.layout.parties]
        self.run_dir = run_dir
        self.log = RunLog(run_dir / "log.h5", config_yaml=to_yaml(cfg),
                          algorithm=method_key(cfg.fed.algorithm, cfg.fed.setting), run_name=run_dir.name,
                          parties=self.parties, data=data_description,
                          val_sets=list(cfg.data.val_sets),
                          fv_candidates=cfg.fv.T if fv_runs(cfg) else 0, resume_round=resume_round,
                          config_changes=config_changes, eval_columns=benchmark_columns(cfg),
                          extra_tables=setting.log_tables if setting is not None else None)
        if setting is not None:
            self.side, self.exchange = setting.side_work(self), exchange or setting.exchange(self)
        else:
            self.side = SideWork(ctx, self.log, self.parties, initial_weights(cfg, ctx.layout))
            self.exchange = exchange or SiloExchange(ctx, self.mean.flat.numel(), self.down.flat.numel(),
                                                     kept=self.side.uploads_kept)
        self.aggregator = self.algorithm.aggregator()
        check_exchange(self.aggregator, self.exchange, cfg.fed.algorithm)
        self.step = ServerStep(self.algorithm, self.aggregator, self.down, self.mean, self.algo_state,
                               self.state.n_trainable)
        self.progress = Progress(cfg.rounds, self.parties)
        self.w = self.side.weighting.for_round(-1, None)
        self.elapsed_before = 0.0  # wall time of the rounds before a resume
        self.bad_records: dict[str, int] = {}  # skipped with data.skip_bad, per party (this launch)

    def run(self, start_round: int = 0, checkpointer: Checkpointer | None = None) -> int:
        cfg, exchange, side = self.ctx.cfg, self.exchange, self.side
        D = self.state.numel
        exchange.send(self.down.flat)
        started = time.perf_counter() - self.elapsed_before
        for r in range(start_round, cfg.rounds):
            round_start = time.perf_counter()
            with comm.naming_failures(f"round {r + 1}"):
                exchange.post(r)
                side.work_until(exchange.is_complete, r)
                exchange.wait()
                rows = exchange.rows
                self.w = side.weighting.for_round(r, None if rows is None else rows[:, :D])
                self.step(exchange, self.w, exchange.participation)           # aggregate, server update
                exchange.send(self.down.flat)
                stats = exchange.round_stats(r)
            self.record(r, stats, time.perf_counter() - round_start, time.perf_counter() - started)
            side.round_done(r, self.theta)
            if checkpointer and checkpointer.round_end(
                    r + 1, lambda: self.checkpoint_parts(time.perf_counter() - started)):
                self.finish(preempted=True)
                return signals.EXIT_PREEMPTED
        self.finish()
        return 0

    def record(self, r: int, stats: list, round_time: float, wall_time: float) -> None:
        cfg = self.ctx.cfg
        P = len(self.parties)
        loss, images, seconds, count = np.zeros(P), np.zeros(P), np.zeros(P), np.zeros(P)
        bad = np.zeros(P, dtype=np.int64)
        for s in stats:
            i = s["party"]
            bad[i] += s.get("bad_records", 0)
            loss[i] += s["loss"]
            images[i] += s["images"]
            seconds[i] = max(seconds[i], s["seconds"])
            count[i] += 1
        loss /= np.maximum(count, 1)
        party_ips = images / np.maximum(seconds, 1e-9)
        moved = self.exchange.bytes_per_round()
        fv = self.side.fv_iterations
        self.log.append("rounds", round=r, step=(r + 1) * cfg.fed.K, lr=cfg.lr_at_round(r), wall_time=wall_time,
                        round_time=round_time, images_per_s=images.sum() / round_time,
                        bytes_moved=sum(moved.values()), bytes_up=moved["up"], bytes_down=moved["down"],
                        bytes_intra=moved["intra"], fv_iterations=fv, loss=loss, party_images_per_s=party_ips)
        self.progress.line(r, loss, images.sum() / round_time, wall_time,
                           fv=fv if self.side.fv is not None else None)
        if bad.any() and dict(zip(self.parties, bad.tolist())) != self.bad_records:
            self.bad_records = dict(zip(self.parties, bad.tolist()))
            self.log.record_bad_records(self.bad_records)

    def checkpoint_parts(self, wall_time: float) -> dict:
        """The server's part of a checkpoint (fedmpi.store.checkpoint): Θ, the rule's state, w, FV state."""
        self.side.flush_evaluations()
        tree = {"theta": self.theta, "algorithm": self.algo_state, "w": self.w, "wall_time": wall_time,
                "validation": self.side.state_dict(), "config": to_yaml(self.ctx.cfg), "rng": capture_rng()}
        return {SERVER_PART: tree}

    def load_checkpoint(self, folder) -> int:
        """Take the state of a checkpoint written by `checkpoint_parts`; returns the round to continue at."""
        saved = read_part(folder / SERVER_PART)
        copy_into(self.theta, saved["theta"], "theta")
        copy_into(self.algo_state, saved["algorithm"], "algorithm")
        self.w = saved["w"].to(self.w)
        self.side.load_state_dict(saved["validation"])
        self.state.write(self.theta)
        self.elapsed_before = float(saved["wall_time"])
        restore_rng(saved["rng"])
        return int(saved["_attrs"]["round"])

    def finish(self, preempted: bool = False) -> None:
        cfg = self.ctx.cfg
        if cfg.run.save_final and not preempted:
            torch.save({"theta": self.theta.cpu().clone(), "n_trainable": self.state.n_trainable,
                        "keys": [k for k in self.backbone.state_dict()]}, cfg.run.save_final)
        self.side.finish()
        self.log.close()
        skipped = ("  bad records skipped: " + ", ".join(f"{k} {v}" for k, v in self.bad_records.items()) + "\n"
                   if self.bad_records else "")
        self.progress.summary(self.run_dir / "log.h5", extra=skipped + self.side.summary())


def run_server(ctx: Context, run_dir, data_description: dict, resume=None) -> int:
    server = Server(ctx, run_dir, data_description, resume_round=resume.round if resume else None,
                    config_changes=resume.changes if resume else None)
    return drive(server, ctx, run_dir, resume)
