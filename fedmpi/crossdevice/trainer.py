"""A trainer rank of a cross-device run: each round it receives its share of the sampled clients, trains them
one after another from the global model, and joins the reduction of sum_k n_k theta_k to the server."""
from __future__ import annotations

import time

from fedmpi.algorithms import build_algorithm
from fedmpi.crossdevice.client_data import open_client_data
from fedmpi.crossdevice.exchange import TrainerSide
from fedmpi.crossdevice.local_training import LocalTrainer
from fedmpi.crossdevice.model import build_client_model
from fedmpi.roles import signals
from fedmpi.roles.context import BackboneState, drive
from fedmpi.store.checkpoint import read_manifest


class ClientTrainer:
    def __init__(self, ctx):
        self.ctx = ctx
        cfg = ctx.cfg
        self.exchange = TrainerSide(ctx)
        data = open_client_data(cfg)
        model = build_client_model(cfg, ctx.device, ctx.dtype)
        self.state = BackboneState(model)
        self.theta = self.state.read()
        self.local = LocalTrainer(model, self.state, build_algorithm(cfg), data, epochs=cfg.clients.epochs,
                                  batch_size=cfg.optim.batch_size, seed=cfg.run.seed, augment=cfg.clients.augment,
                                  device=ctx.device, dtype=ctx.dtype)

    def run(self, start_round: int = 0, checkpointer=None) -> int:
        cfg, ex = self.ctx.cfg, self.exchange
        ex.receive_global(self.theta)
        for r in range(start_round, cfg.rounds):
            clients = ex.receive_assignment(r)
            start = time.perf_counter()
            payload, stats = self.local.train_round(self.theta, clients, r, cfg.lr_at_round(r))
            stats["seconds"] = time.perf_counter() - start
            ex.send_local(payload)
            ex.receive_global(self.theta)
            ex.send_stats(r, stats)
            # clients are stateless and their batch order comes from (seed, round, client): nothing to save
            if checkpointer and checkpointer.round_end(r + 1, lambda: {}):
                return signals.EXIT_PREEMPTED
        return 0

    def load_checkpoint(self, folder) -> int:
        return int(read_manifest(folder)["round"])


def run_client_trainer(ctx, run_dir, resume=None) -> int:
    return drive(ClientTrainer(ctx), ctx, run_dir, resume)
