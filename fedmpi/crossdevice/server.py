"""The server of a cross-device run (Hsu et al., Algorithm 1). Its loop has the shape of the server's round loop
(docs/ARCHITECTURE.md): the exchange (fedmpi.crossdevice.exchange) samples the reporting clients, spreads them
over the trainer ranks and reduces sum_k n_k theta_k / sum_k n_k; the rule's server update (FedAvg; FedAvgM:
server momentum, heavy ball or Nesterov) makes the new Theta, which goes back to the trainers; then the round is
logged and the global model's test accuracy evaluated every eval.every rounds and after the last."""
from __future__ import annotations

import time

import numpy as np
import torch

from fedmpi.algorithms import build_algorithm
from fedmpi.config import to_yaml
from fedmpi.crossdevice.client_data import open_client_data
from fedmpi.crossdevice.evaluation import EVAL_COLUMNS, test_accuracy
from fedmpi.crossdevice.exchange import ClientExchange
from fedmpi.crossdevice.model import build_client_model
from fedmpi.crossdevice.sampler import ClientSampler
from fedmpi.roles import signals
from fedmpi.roles.context import BackboneState, drive
from fedmpi.roles.evaluation import evaluation_due
from fedmpi.roles.progress import Progress
from fedmpi.store.checkpoint import SERVER_PART, capture_rng, copy_into, read_part, restore_rng
from fedmpi.store.h5log import RunLog


class ClientServer:
    def __init__(self, ctx, run_dir, resume_round: int | None = None):
        self.ctx = ctx
        cfg = ctx.cfg
        self.data = open_client_data(cfg)
        self.model = build_client_model(cfg, ctx.device, ctx.dtype)
        self.state = BackboneState(self.model)
        self.theta = self.state.read()
        self.algorithm = build_algorithm(cfg)
        self.algo_state = self.algorithm.init_server_state(self.theta[:self.state.n_trainable])
        c = cfg.clients
        population = len(self.data.parts)
        sampler = ClientSampler(population, c.fraction if population > 1 else 1.0, c.sampler_seed)
        self.exchange = ClientExchange(ctx, sampler, self.data.sizes(), self.state.numel)
        self.mean = torch.empty_like(self.theta)
        self.log = RunLog(run_dir / "log.h5", config_yaml=to_yaml(cfg), algorithm=cfg.fed.algorithm,
                          run_name=run_dir.name, parties=["clients"], data=self.data.description,
                          resume_round=resume_round,
                          extra_tables={"clients": {"round": ((), "i8"), "ids": ((sampler.count,), "i8")},
                                        "eval": EVAL_COLUMNS})
        self.run_dir = run_dir
        self.progress = Progress(cfg.rounds, ["clients"])
        self.elapsed_before = 0.0
        self.last_accuracy: tuple[int, float] | None = None

    def run(self, start_round: int = 0, checkpointer=None) -> int:
        cfg, ex = self.ctx.cfg, self.exchange
        ex.send(self.theta)
        started = time.perf_counter() - self.elapsed_before
        for r in range(start_round, cfg.rounds):
            round_start = time.perf_counter()
            ex.post(r)
            ex.wait()
            self.aggregate(ex.weighted_mean(None, self.mean))
            ex.send(self.theta)
            stats = ex.round_stats()
            self.log.append("clients", round=r, ids=ex.clients)
            self.record(r, stats, time.perf_counter() - round_start, time.perf_counter() - started)
            if checkpointer and checkpointer.round_end(r + 1, lambda: self.checkpoint_parts(
                    time.perf_counter() - started)):
                self.finish()
                return signals.EXIT_PREEMPTED
        self.finish()
        return 0

    def aggregate(self, average: torch.Tensor) -> None:
        """Theta <- the rule's server update from the clients' average sum_k n_k theta_k / sum_k n_k."""
        n = self.state.n_trainable
        self.theta[n:] = average[n:]
        self.theta[:n] = self.algorithm.server_update(self.theta[:n], average[:n], self.algo_state)

    def record(self, r: int, stats: list[dict], round_time: float, wall_time: float) -> None:
        cfg = self.ctx.cfg
        weight = sum(s["weight"] for s in stats)
        loss = np.array([sum(s["loss_sum"] for s in stats) / max(weight, 1)])
        images = sum(s["images"] for s in stats)
        seconds = max(s["seconds"] for s in stats)
        bytes_moved = sum(self.exchange.bytes_per_round().values())
        self.log.append("rounds", round=r, step=r + 1, lr=cfg.lr_at_round(r), wall_time=wall_time,
                        round_time=round_time, images_per_s=images / round_time, bytes_moved=bytes_moved,
                        loss=loss, party_images_per_s=np.array([images / max(seconds, 1e-9)]))
        if evaluation_due(r, cfg.eval.every, cfg.rounds):
            self.state.write(self.theta)
            accuracy, test_loss = test_accuracy(self.model, self.data, cfg.clients.eval_images, cfg.eval.batch_size,
                                                self.ctx.device, self.ctx.dtype)
            self.log.append("eval", round=r, step=r + 1, **{"test/accuracy": accuracy, "test/loss": test_loss})
            self.last_accuracy = (r, accuracy)
        note = f"test acc {100 * self.last_accuracy[1]:.2f}% (round {self.last_accuracy[0] + 1})" \
            if self.last_accuracy else ""
        self.progress.line(r, loss, images / round_time, wall_time, note)

    def checkpoint_parts(self, wall_time: float) -> dict:
        tree = {"theta": self.theta, "algorithm": self.algo_state, "exchange": self.exchange.state_dict(),
                "wall_time": wall_time, "config": to_yaml(self.ctx.cfg), "rng": capture_rng()}
        return {SERVER_PART: tree}

    def load_checkpoint(self, folder) -> int:
        saved = read_part(folder / SERVER_PART)
        copy_into(self.theta, saved["theta"], "theta")
        copy_into(self.algo_state, saved["algorithm"], "algorithm")
        self.exchange.load_state_dict(saved["exchange"])
        self.state.write(self.theta)
        self.elapsed_before = float(saved["wall_time"])
        restore_rng(saved["rng"])
        return int(saved["_attrs"]["round"])

    def finish(self) -> None:
        cfg = self.ctx.cfg
        if cfg.run.save_final:
            torch.save({"theta": self.theta.cpu(), "n_trainable": self.state.n_trainable,
                        "keys": list(self.model.state_dict())}, cfg.run.save_final)
        self.log.close()
        extra = f"  test accuracy {100 * self.last_accuracy[1]:.2f}% after round {self.last_accuracy[0] + 1}" \
            if self.last_accuracy else ""
        self.progress.summary(self.run_dir / "log.h5", extra=extra)


def run_client_server(ctx, run_dir, resume=None) -> int:
    return drive(ClientServer(ctx, run_dir, resume_round=resume.round if resume else None), ctx, run_dir, resume)
