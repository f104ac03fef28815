"""The server rank: holds the global backbone Theta and the weighting w, aggregates the parties' backbones
every round (eq. 4, then the rule's server update), writes the run log, prints progress."""
from __future__ import annotations

import time

import numpy as np
import torch

from fedmpi import comm
from fedmpi.algorithms import build_algorithm
from fedmpi.config import to_yaml
from fedmpi.roles import signals
from fedmpi.roles.context import BackboneState, Context, build_backbone, drive, initial_weights
from fedmpi.roles.benchmarks import log_columns as benchmark_columns
from fedmpi.roles.exchange import broadcast_global, round_statistics, weighted_average
from fedmpi.roles.federated_validation import ServerValidation
from fedmpi.roles.progress import Progress
from fedmpi.store.checkpoint import (SERVER_PART, Checkpointer, capture_rng, copy_into, read_part,
                                     restore_rng)
from fedmpi.store.h5log import RunLog


class Server:
    def __init__(self, ctx: Context, run_dir, data_description: dict, resume_round: int | None = None,
                 config_changes: dict | None = None):
        self.ctx = ctx
        cfg = ctx.cfg
        self.backbone = build_backbone(cfg, ctx.device, ctx.dtype)
        self.state = BackboneState(self.backbone)
        self.theta = self.state.read()
        self.algorithm = build_algorithm(cfg)
        n = self.state.n_trainable
        self.algo_state = self.algorithm.init_server_state(self.theta[:n])
        self.w = initial_weights(cfg, ctx.layout)
        self.parties = [p.name for p in ctx.layout.parties]
        self.run_dir = run_dir
        self.log = RunLog(run_dir / "log.h5", config_yaml=to_yaml(cfg), algorithm=cfg.fed.algorithm,
                          run_name=run_dir.name, parties=self.parties, data=data_description,
                          val_sets=list(cfg.data.val_sets), fv_candidates=cfg.fv.T if cfg.fv.enabled else 0,
                          resume_round=resume_round, config_changes=config_changes,
                          eval_columns=benchmark_columns(cfg))
        self.validation = ServerValidation(ctx, self.log, self.parties, self.w)  # FV + evaluation
        self.progress = Progress(cfg.rounds, self.parties)
        self._slots = [torch.empty_like(self.theta) for _ in range(1 + len(self.parties))]
        self.elapsed_before = 0.0  # wall time of the rounds before a resume
        self.bad_records: dict[str, int] = {}  # skipped with data.skip_bad, per party (this launch)

    def run(self, start_round: int = 0, checkpointer: Checkpointer | None = None) -> int:
        cfg = self.ctx.cfg
        broadcast_global(self.ctx, self.theta)
        started = time.perf_counter() - self.elapsed_before
        for r in range(start_round, cfg.rounds):
            round_start = time.perf_counter()
            with comm.naming_failures(f"round {r + 1}"):
                thetas, self.w = self.validation.gather(r, self.theta, self._slots, self.w)
                self.aggregate(thetas)
                broadcast_global(self.ctx, self.theta)
                stats = comm.gather(None, what=round_statistics(r), timeout_s=cfg.run.collective_timeout_s,
                                    comm=self.ctx.mpi_fed)
            self.record(r, stats, time.perf_counter() - round_start, time.perf_counter() - started)
            self.validation.round_done(r, self.theta)
            if checkpointer and checkpointer.round_end(
                    r + 1, lambda: self.checkpoint_parts(time.perf_counter() - started)):
                self.finish(preempted=True)
                return signals.EXIT_PREEMPTED
        self.finish()
        return 0

    def aggregate(self, thetas: list[torch.Tensor]) -> None:
        average = weighted_average(thetas, self.w)
        n = self.state.n_trainable
        new = average  # BN running statistics and frozen parameters: the weighted average
        new[:n] = self.algorithm.server_update(self.theta[:n], average[:n], self.algo_state)
        self.theta.copy_(new)

    def record(self, r: int, stats: list, round_time: float, wall_time: float) -> None:
        cfg = self.ctx.cfg
        P = len(self.parties)
        loss, images, seconds, count = np.zeros(P), np.zeros(P), np.zeros(P), np.zeros(P)
        bad = np.zeros(P, dtype=np.int64)
        for s in stats:
            if s is None:
                continue
            i = s["party"]
            bad[i] += s["bad_records"]
            loss[i] += s["loss"]
            images[i] += s["images"]
            seconds[i] = max(seconds[i], s["seconds"])
            count[i] += 1
        loss /= np.maximum(count, 1)
        party_ips = images / np.maximum(seconds, 1e-9)
        bytes_moved = self.bytes_per_round()
        self.log.append("rounds", round=r, step=(r + 1) * cfg.fed.K, lr=cfg.lr_at_round(r), wall_time=wall_time,
                        round_time=round_time, images_per_s=images.sum() / round_time, bytes_moved=bytes_moved,
                        loss=loss, party_images_per_s=party_ips)
        self.progress.line(r, loss, images.sum() / round_time, wall_time)
        if bad.any() and dict(zip(self.parties, bad.tolist())) != self.bad_records:
            self.bad_records = dict(zip(self.parties, bad.tolist()))
            self.log.record_bad_records(self.bad_records)

    def bytes_per_round(self) -> int:
        """Backbone payload moved per round: P theta_i up to the server, Theta down to P leaders, and each
        leader's intra-party broadcast to its other ranks."""
        B = self.state.nbytes()
        P = len(self.parties)
        intra = sum(len(p.ranks) - 1 for p in self.ctx.layout.parties)
        return B * (P + P + intra)

    def checkpoint_parts(self, wall_time: float) -> dict:
        """The server's part of a checkpoint (fedmpi.store.checkpoint): Θ, the rule's state, w, FV state."""
        self.validation.flush_evaluations()
        tree = {"theta": self.theta, "algorithm": self.algo_state, "w": self.w, "wall_time": wall_time,
                "validation": self.validation.state_dict(), "config": to_yaml(self.ctx.cfg), "rng": capture_rng()}
        return {SERVER_PART: tree}

    def load_checkpoint(self, folder) -> int:
        """Take the state of a checkpoint written by `checkpoint_parts`; returns the round to continue at."""
        saved = read_part(folder / SERVER_PART)
        copy_into(self.theta, saved["theta"], "theta")
        copy_into(self.algo_state, saved["algorithm"], "algorithm")
        self.w = saved["w"].to(self.w)
        self.validation.load_state_dict(saved["validation"])
        self.state.write(self.theta)
        self.elapsed_before = float(saved["wall_time"])
        restore_rng(saved["rng"])
        return int(saved["_attrs"]["round"])

    def finish(self, preempted: bool = False) -> None:
        cfg = self.ctx.cfg
        if cfg.run.save_final and not preempted:
            torch.save({"theta": self.theta.cpu(), "n_trainable": self.state.n_trainable,
                        "keys": [k for k in self.backbone.state_dict()]}, cfg.run.save_final)
        self.validation.finish()
        self.log.close()
        skipped = ("  bad records skipped: " + ", ".join(f"{k} {v}" for k, v in self.bad_records.items()) + "\n"
                   if self.bad_records else "")
        self.progress.summary(self.run_dir / "log.h5", extra=skipped + self.validation.summary())


def run_server(ctx: Context, run_dir, data_description: dict, resume=None) -> int:
    server = Server(ctx, run_dir, data_description, resume_round=resume.round if resume else None,
                    config_changes=resume.changes if resume else None)
    return drive(server, ctx, run_dir, resume)
