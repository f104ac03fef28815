"""The cross-device setting as the server's round loop takes it (fedmpi.roles.server.Server, `setting=`): the
model (the McMahan CNN), the clients' data and partition (logged in /data), the exchange (sample, reduce, the
clients' states), the run log's extra tables (/clients, /eval with test accuracy) and the side work (test
accuracy of Theta every eval.every rounds and after the last). The loop itself is the silo runs' loop."""
from __future__ import annotations

import sys

import torch

from fedmpi.crossdevice.client_data import open_client_data
from fedmpi.crossdevice.client_state import client_store
from fedmpi.crossdevice.evaluation import EVAL_COLUMNS, test_accuracy
from fedmpi.crossdevice.exchange import ClientExchange
from fedmpi.crossdevice.model import build_client_model
from fedmpi.crossdevice.sampler import ClientSampler
from fedmpi.roles.side_work import FixedWeighting


def _due(r: int, every: int, rounds: int) -> bool:
    """After the first round, every `every` rounds (0: none of those) and always after the last."""
    return r == rounds - 1 or (every > 0 and (r == 0 or (r + 1) % every == 0))


class ClientSideWork:
    """What the loop calls as side work: no FV (fixed weighting), the test accuracy evaluations."""
    fv = None
    fv_iterations = 0
    uploads_kept = 0

    def __init__(self, setting, log, progress_holder, stream=sys.stdout):
        self.setting, self.log, self.holder, self.stream = setting, log, progress_holder, stream
        self.weighting = FixedWeighting(torch.ones(1, dtype=torch.float64))
        self.first: tuple[int, float] | None = None
        self.last: tuple[int, float] | None = None

    def work_until(self, complete, r: int) -> None:
        """Nothing runs beside the clients (the evaluation needs the round's Theta)."""

    def round_done(self, r: int, theta: torch.Tensor) -> None:
        cfg, s = self.setting.cfg, self.setting
        if not _due(r, cfg.eval.every, cfg.rounds):
            return
        s.state.write(theta)
        accuracy, loss = test_accuracy(s.model, s.data, cfg.clients.eval_images, cfg.eval.batch_size, s.device,
                                       s.dtype)
        self.log.append("eval", round=r, step=r + 1, **{"test/accuracy": accuracy, "test/loss": loss})
        self.first = self.first or (r, accuracy)
        self.last = (r, accuracy)
        self.holder.progress.note = f"test acc {100 * accuracy:.2f}% (round {r + 1})"
        self.stream.write(f"eval after round {r + 1}: test accuracy {100 * accuracy:.2f}%  loss {loss:.4f}\n")
        self.stream.flush()

    def flush_evaluations(self) -> None:
        """Evaluations run at once: nothing is pending at a checkpoint."""

    def finish(self) -> None:
        pass

    def summary(self) -> str:
        if not self.last:
            return ""
        (r0, a0), (r1, a1) = self.first, self.last
        return f"  test accuracy {100 * a0:.2f}% (round {r0 + 1}) -> {100 * a1:.2f}% (round {r1 + 1})"

    def state_dict(self) -> dict:
        """The sampler's state (and the clients' states, for a rule that keeps them) ride in the server's
        checkpoint with the side work's (its 'validation' entry)."""
        return {"fv": None, "sampler": self.setting.exchange_.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.setting.exchange_.load_state_dict(state["sampler"])


class CrossDeviceSetting:
    def __init__(self, ctx):
        self.ctx, self.cfg = ctx, ctx.cfg
        self.device, self.dtype = ctx.device, ctx.dtype
        self.data = open_client_data(self.cfg)
        self.model = build_client_model(self.cfg, ctx.device, ctx.dtype)
        self.state = None          # the server's BackboneState over self.model, set by `exchange`
        self.exchange_: ClientExchange | None = None
        population = len(self.data.parts)
        c = self.cfg.clients
        self.sampler = ClientSampler(population, c.fraction if population > 1 else 1.0, c.sampler_seed)
        self.log_tables = {"clients": {"round": ((), "i8"), "ids": ((self.sampler.count,), "i8")},
                           "eval": EVAL_COLUMNS}

    @property
    def data_description(self) -> dict:
        return self.data.description

    def side_work(self, server) -> ClientSideWork:
        return ClientSideWork(self, server.log, server)

    def exchange(self, server) -> ClientExchange:
        self.state = server.state
        store = client_store(server.algorithm, server.state.trainable)
        self.exchange_ = ClientExchange(self.ctx, self.sampler, self.data.sizes(), server.mean.flat.numel(),
                                        server.log, store)
        return self.exchange_


def run_client_server(ctx, run_dir, resume=None) -> int:
    from fedmpi.roles.context import drive
    from fedmpi.roles.server import Server

    setting = CrossDeviceSetting(ctx)
    server = Server(ctx, run_dir, setting.data_description, resume_round=resume.round if resume else None,
                    config_changes=resume.changes if resume else None, setting=setting)
    return drive(server, ctx, run_dir, resume)
