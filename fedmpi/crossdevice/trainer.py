"""A trainer rank of a cross-device run: each round it receives its share of the sampled clients (and their
states, for a rule that keeps per-client state), trains them one after another from the global payload, sends
the states back and joins the reduction of sum_k n_k [theta_k | up payloads] to the server; then it takes the
next global payload and lets the rule rebuild its global_state from it (PFM's M)."""
from __future__ import annotations

import time

from fedmpi.algorithms.build import build_algorithm
from fedmpi.crossdevice.client_data import open_client_data
from fedmpi.crossdevice.exchange import TrainerSide
from fedmpi.crossdevice.local_training import LocalTrainer
from fedmpi.crossdevice.model import build_client_model
from fedmpi.roles import signals
from fedmpi.roles.context import BackboneState, drive
from fedmpi.store.checkpoint import copy_into, read_manifest, read_part

# The rule's global_state (the same on every trainer rank), written by the first trainer rank.
TRAINER_PART = "trainers.h5"


class ClientTrainer:
    def __init__(self, ctx):
        self.ctx = ctx
        cfg = ctx.cfg
        self.exchange = TrainerSide(ctx)
        data = open_client_data(cfg)
        model = build_client_model(cfg, ctx.device, ctx.dtype)
        self.state = BackboneState(model)
        self.local = LocalTrainer(model, self.state, build_algorithm(cfg), data, epochs=cfg.clients.epochs,
                                  batch_size=cfg.optim.batch_size, seed=cfg.run.seed, augment=cfg.clients.augment,
                                  device=ctx.device, dtype=ctx.dtype)
        self.previous = self.local.down.theta.clone()

    def run(self, start_round: int = 0, checkpointer=None) -> int:
        cfg, ex, local = self.ctx.cfg, self.exchange, self.local
        down = local.down.flat
        ex.receive_global(down)
        for r in range(start_round, cfg.rounds):
            lr = cfg.lr_at_round(r)
            clients = ex.receive_assignment(r)
            states = ex.receive_states(len(clients), local.layout.initial) if local.layout else None
            start = time.perf_counter()
            payload, stats = local.train_round(down, clients, r, lr, states)
            stats["seconds"] = time.perf_counter() - start
            if states:
                ex.send_states(states)
            ex.send_local(payload)
            self.previous.copy_(local.down.theta)
            ex.receive_global(down)
            local.new_global(self.previous, lr)
            ex.send_stats(r, stats)
            # a client's batch order comes from (seed, round, client) and its state lives with the server
            if checkpointer and checkpointer.round_end(r + 1, self.checkpoint_parts):
                return signals.EXIT_PREEMPTED
        return 0

    def checkpoint_parts(self) -> dict:
        if not self.local.shared or self.ctx.rank != self.exchange.trainers[0]:
            return {}
        return {TRAINER_PART: {"algorithm": self.local.shared}}

    def load_checkpoint(self, folder) -> int:
        if self.local.shared:
            saved = read_part(folder / TRAINER_PART, ("algorithm",))
            copy_into(self.local.shared, saved["algorithm"], "algorithm")
        return int(read_manifest(folder)["round"])


def run_client_trainer(ctx, run_dir, resume=None) -> int:
    return drive(ClientTrainer(ctx), ctx, run_dir, resume)
