"""The server rank: holds the global backbone Theta and the weighting w, aggregates the parties' backbones
every round (eq. 4, then the rule's server update), writes the run log, prints progress."""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.distributed as dist

from fedmpi.algorithms import build_algorithm
from fedmpi.config import to_yaml
from fedmpi.roles.context import BackboneState, Context, build_backbone, initial_weights
from fedmpi.roles.exchange import broadcast_global, gather_locals, weighted_average
from fedmpi.roles.progress import Progress
from fedmpi.store.h5log import RunLog


class Server:
    def __init__(self, ctx: Context, run_dir, data_description: dict):
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
                          run_name=run_dir.name, parties=self.parties, data=data_description)
        self.progress = Progress(cfg.rounds, self.parties)
        self._slots = [torch.empty_like(self.theta) for _ in range(1 + len(self.parties))]

    def run(self, start_round: int = 0) -> None:
        cfg = self.ctx.cfg
        broadcast_global(self.ctx, self.theta)
        started = time.perf_counter()
        for r in range(start_round, cfg.rounds):
            round_start = time.perf_counter()
            thetas = gather_locals(self.ctx, self.theta, self._slots)
            self.aggregate(thetas)
            broadcast_global(self.ctx, self.theta)
            stats = self.ctx.mpi_fed.gather(None, root=0)
            self.record(r, stats, time.perf_counter() - round_start, time.perf_counter() - started)
        self.finish()

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
        for s in stats:
            if s is None:
                continue
            i = s["party"]
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

    def bytes_per_round(self) -> int:
        """Backbone payload moved per round: P theta_i up to the server, Theta down to P leaders, and each
        leader's intra-party broadcast to its other ranks."""
        B = self.state.nbytes()
        P = len(self.parties)
        intra = sum(len(p.ranks) - 1 for p in self.ctx.layout.parties)
        return B * (P + P + intra)

    def finish(self) -> None:
        cfg = self.ctx.cfg
        if cfg.run.save_final:
            torch.save({"theta": self.theta.cpu(), "n_trainable": self.state.n_trainable,
                        "keys": [k for k in self.backbone.state_dict()]}, cfg.run.save_final)
        self.log.close()
        self.progress.summary(self.run_dir / "log.h5")


def run_server(ctx: Context, run_dir, data_description: dict) -> int:
    Server(ctx, run_dir, data_description).run()
    dist.barrier()
    return 0
