"""The cross-device setting as the server's round loop takes it (core/seams.py): the model (the McMahan CNN),
the clients' data and partition (logged in /data), the exchange (sample, reduce, the clients' states), the run
log's extra tables (/clients, /eval with test accuracy) and the side work (test accuracy of Θ on the evaluation
schedule of every setting, core/schedule.py). The loop is the one every setting runs."""
from __future__ import annotations

import sys

import torch

from fedmpi.core.build import RunParts
from fedmpi.core.context import Context
from fedmpi.crossdevice.client_data import open_client_data
from fedmpi.crossdevice.client_state import client_store
from fedmpi.crossdevice.evaluation import EVAL_COLUMNS, test_accuracy
from fedmpi.crossdevice.exchange import ClientExchange, client_group
from fedmpi.crossdevice.sampler import ClientSampler
from fedmpi.crossdevice.secure_exchange import SecureClientExchange, log_table as secure_log_table
from fedmpi.core.driver import drive
from fedmpi.core.schedule import evaluation_due
from fedmpi.core.server import Server
from fedmpi.core.seams import NoClasses


class ExampleCounts:
    """The cross-device round's weighting: each client by its example count, applied on the trainer ranks before
    the exchange's reduction, so the server's step gets no w (None); when the exchange keeps every client's upload
    (rows), w is n_k / sum n_k over them."""

    def __init__(self, setting):
        self.setting = setting

    def for_round(self, r: int, rows) -> torch.Tensor | None:
        return None if rows is None else self.setting.uploads.example_weights()


class TestAccuracy:
    """The side work of a cross-device run: the test accuracy of Θ when an evaluation is due (nothing runs
    while the clients train: the evaluation needs the round's Θ)."""
    uploads_kept = 0

    def __init__(self, setting, log, stream=sys.stdout):
        self.setting, self.log, self.stream = setting, log, stream
        self.weighting = ExampleCounts(setting)
        self.first: tuple[int, float] | None = None
        self.last: tuple[int, float] | None = None

    def work_until(self, complete, r: int) -> None:
        pass

    def round_done(self, r: int, theta: torch.Tensor) -> None:
        cfg, s = self.setting.cfg, self.setting
        if not evaluation_due(r, cfg.eval.every, cfg.rounds):
            return
        s.parts.state.write(theta)
        accuracy, loss = test_accuracy(s.parts.model, s.data, cfg.clients.eval_images, cfg.eval.batch_size,
                                       s.parts.device, s.parts.dtype)
        self.log.append("eval", round=r, step=r + 1, **{"test/accuracy": accuracy, "test/loss": loss})
        self.first = self.first or (r, accuracy)
        self.last = (r, accuracy)
        self.stream.write(f"eval after round {r + 1}: test accuracy {100 * accuracy:.2f}%  loss {loss:.4f}\n")
        self.stream.flush()

    def round_columns(self) -> dict:
        """The /rounds columns every run's log has (schema 1): no FV iteration runs here."""
        return {"fv_iterations": 0}

    def progress_note(self) -> str:
        return f"test acc {100 * self.last[1]:.2f}% (round {self.last[0] + 1})" if self.last else ""

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
        """Nothing: the sampler's and the clients' states are the exchange's."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class CrossDeviceSetting:
    def __init__(self, cfg, ctx: Context, parts: RunParts):
        self.cfg, self.ctx, self.parts = cfg, ctx, parts
        self.data = open_client_data(cfg)
        self.uploads = None        # the server's ClientExchange, set by `exchange`
        self.parties = [p.name for p in ctx.layout.parties]     # one row: the sampled clients
        population = len(self.data.parts)
        c = cfg.clients
        self.sampler = ClientSampler(population, c.fraction if population > 1 else 1.0, c.sampler_seed)
        self.log_schema = {"val_sets": list(cfg.data.val_sets),
                           "extra_tables": {"clients": {"round": ((), "i8"), "ids": ((self.sampler.count,), "i8")},
                                            "eval": EVAL_COLUMNS}}
        if cfg.fed.secure_aggregation.enabled:     # who missed which stage of the round's session
            self.log_schema["extra_tables"]["secagg"] = secure_log_table(self.sampler.count)
        self.party_tables: dict = {}   # no per-client numbers beyond the round's statistics

    @property
    def data_description(self) -> dict:
        return self.data.description

    def side_work(self, log) -> TestAccuracy:
        return TestAccuracy(self, log)

    def exchange(self, log, up_numel: int, down_numel: int, kept: int) -> ClientExchange:
        ctx, parts = self.ctx, self.parts
        trainers = ctx.layout.trainer_ranks
        if self.cfg.fed.secure_aggregation.enabled:
            self.uploads = SecureClientExchange(self.cfg, trainers, client_group(trainers), ctx.control, self.sampler,
                                                self.data.sizes(), up_numel, parts.state.numel, parts.device,
                                                parts.dtype, log=log)
            return self.uploads
        self.uploads = ClientExchange(trainers, client_group(trainers), ctx.control, self.sampler, self.data.sizes(),
                                      up_numel, parts.device, parts.dtype, log=log,
                                      store=client_store(parts.rule, parts.state.trainable),
                                      every_upload=parts.every_upload)
        return self.uploads

    def class_exchange(self, part) -> NoClasses:
        """Nothing: the clients keep no classifier of their own (the config refuses a class part here)."""
        return NoClasses()


def run_client_server(cfg, ctx: Context, parts: RunParts, run_dir, resume=None) -> int:
    server = Server(cfg, parts, CrossDeviceSetting(cfg, ctx, parts), run_dir,
                    resume_round=resume.round if resume else None, config_changes=resume.changes if resume else None)
    return drive(server, cfg, ctx, run_dir, resume)
