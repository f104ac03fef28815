"""The server rank: the round loop. It holds the global payload (Θ and the rule's down payloads) and the
rule's server state; each round it receives the uploads through its setting's exchange, takes the round's
weighting from the side work, runs the server step (aggregator + the rule's server update), sends the new
global payload, logs, lets the side work run and checkpoints. Nothing here depends on the setting (silo parties
or cross-device clients): the setting provides the model, the exchange and the side work (core/seams.py).
See docs/ARCHITECTURE.md, "The round loop and its seams"."""
from __future__ import annotations

import time

import numpy as np
import torch

from fedmpi import comm
from fedmpi.aggregation.aggregators import check_exchange
from fedmpi.aggregation.influence import Influence, influence_columns
from fedmpi.aggregation.server_step import ServerStep
from fedmpi.aggregation.upload_check import UploadCheck
from fedmpi.algorithms import method_key
from fedmpi.config import Config, to_yaml
from fedmpi.core import signals
from fedmpi.core.build import RunParts
from fedmpi.core.payloads import Payloads
from fedmpi.core.privacy import COLUMNS as PRIVACY_COLUMNS, PrivacyReport
from fedmpi.core.progress import Progress
from fedmpi.core.received import ReceivedRecorder
from fedmpi.core.seams import RoundStats, Setting
from fedmpi.store.checkpoint import SERVER_PART, Checkpointer, capture_rng, copy_into, read_part, restore_rng
from fedmpi.store.h5log import RunLog
from fedmpi.store.upgrade import upgrade_server_part


class Server:
    """`cfg`: the run's (checked) config; `parts`: this rank's rule, model, flat state and aggregator
    (core/build.py); `setting`: the parties or the cross-device clients (core/seams.py)."""

    def __init__(self, cfg: Config, parts: RunParts, setting: Setting, run_dir, resume_round: int | None = None,
                 config_changes: dict | None = None):
        self.cfg = cfg
        self.backbone, self.state, self.algorithm = parts.model, parts.state, parts.rule
        device, dtype = parts.device, parts.dtype
        self.down = Payloads(self.state, self.algorithm.down, device, dtype)
        self.up_numel = self.state.numel + self.state.n_trainable * len(self.algorithm.up)
        # Σ w_i u_i before the server update; a rule whose step is the average itself has it formed straight into Θ
        self.mean = (None if self.algorithm.server_averages
                     else Payloads(self.state, self.algorithm.up, device, dtype))
        self.theta = self.down.theta
        self.state.read(self.theta)
        self.algo_state = self.algorithm.init_server_state(self.down.trainable, self.down.extra)
        self.algo_state.update(self.algorithm.classes.server_state())
        self.parties = setting.parties
        self.party_tables = setting.party_tables
        self.run_dir = run_dir
        schema = dict(setting.log_schema)
        if cfg.fed.dp.enabled:
            schema["extra_tables"] = {**schema.get("extra_tables", {}), "privacy": PRIVACY_COLUMNS}
        if cfg.log.influence:
            schema["extra_tables"] = {**schema.get("extra_tables", {}), "influence": influence_columns(len(self.parties))}
        self.log = RunLog(run_dir / "log.h5", config_yaml=to_yaml(cfg),
                          algorithm=method_key(cfg.fed.algorithm, cfg.fed.setting), run_name=run_dir.name,
                          parties=self.parties, data=setting.data_description, resume_round=resume_round,
                          config_changes=config_changes, placement=[p.as_dict() for p in comm.nodes.places()],
                          **schema)
        if cfg.log.tensorboard:   # the writer's import on this rank only (fedmpi/store/tensorboard.py)
            from fedmpi.store.tensorboard import EventWriter
            self.log.mirror = EventWriter(run_dir, self.parties)
        self.side = setting.side_work(self.log)
        self.exchange = setting.exchange(self.log, self.up_numel, self.down.flat.numel(), self.side.uploads_kept)
        # what of the parties' class embeddings the method's class part lets leave them (nothing by default)
        self.classes = setting.class_exchange(self.algorithm.classes)
        self.aggregator = parts.aggregator
        self.privacy = (PrivacyReport(cfg.fed.dp, cfg.planned_rounds, cfg.rounds, cfg.sampling_rate, self.aggregator)
                        if cfg.fed.dp.enabled else None)
        self.influence = Influence(self.state.n_trainable) if cfg.log.influence else None
        check_exchange(self.aggregator, self.exchange, cfg.fed.algorithm)
        self.check = UploadCheck(cfg.fed.upload_check.action, cfg.fed.upload_check.norm_ratio, self.theta)
        self.step = ServerStep(self.algorithm, self.aggregator, self.down, self.mean, self.algo_state,
                               self.state.n_trainable, self.check)
        self.progress = Progress(cfg.rounds, self.parties)
        self.received = ReceivedRecorder(run_dir, cfg.log.record_received, {
            "numel": self.state.numel, "n_trainable": self.state.n_trainable, "up_numel": self.up_numel,
            "dp": cfg.fed.dp.enabled, "cross_device": cfg.cross_device,
            "algorithm": method_key(cfg.fed.algorithm, cfg.fed.setting)})
        self.w = self.side.weighting.for_round(-1, None)
        self.elapsed_before = 0.0  # wall time of the rounds before a resume
        self.bad_records: dict[str, int] = {}  # skipped with data.skip_bad, per party (this launch)

    def run(self, start_round: int = 0, checkpointer: Checkpointer | None = None) -> int:
        exchange, classes, side = self.exchange, self.classes, self.side
        exchange.send(self.down.flat)
        started = time.perf_counter() - self.elapsed_before
        for r in range(start_round, self.cfg.rounds):
            round_start = time.perf_counter()
            # a diverged round ends the run in one line naming its round and uploads (aggregation/upload_check.py)
            with self.check.naming_round(r), comm.naming_failures(f"round {r + 1}"):
                exchange.post(r)
                classes.post(r)
                side.work_until(lambda: exchange.is_complete() and classes.is_complete(), r)
                exchange.wait()
                classes.wait()
                self.aggregate(r)
                exchange.send(self.down.flat)
                # the class part's step on the class payloads (those of the uploads kept), and the replies
                classes.step(r, self.cfg.lr_at_round(r), self.algo_state, self.excluded())
                stats = exchange.round_stats(r)
            self.record(r, stats, time.perf_counter() - round_start, time.perf_counter() - started)
            self.check.after_round(r, self.down.flat, stats.loss, self.parties)   # before any checkpoint of it
            side.round_done(r, self.theta)
            if checkpointer and checkpointer.round_end(
                    r + 1, lambda: self.checkpoint_parts(time.perf_counter() - started)):
                self.finish(preempted=True)
                return signals.EXIT_PREEMPTED
        self.finish()
        return 0

    def aggregate(self, r: int) -> None:
        """The round's w (the side work's, or the parties' upload column `weight`), then the server step: check,
        aggregate, server update."""
        exchange, rows = self.exchange, self.exchange.rows
        side_w = self.side.weighting.for_round(r, None if rows is None else rows[:, :self.state.numel])
        self.w = exchange.weights(side_w)
        self.received.before_step(r, self.theta, exchange, self.classes)
        self.step(exchange, self.w, exchange.participation)
        self.received.after_step(r, self.theta)
        if self.influence:
            self.influence.measure(r, rows, self.step.combination)

    def excluded(self) -> np.ndarray | None:
        """[P] bool: the uploads the server's check left out this round (None: it checked none)."""
        return self.check.last.excluded if self.check.last else None

    def record(self, r: int, stats: RoundStats, round_time: float, wall_time: float) -> None:
        cfg = self.cfg
        party_ips = stats.images / np.maximum(stats.seconds, 1e-9)
        moved = self.exchange.bytes_per_round()
        moved = {k: v + self.classes.bytes_per_round()[k] for k, v in moved.items()}
        images = stats.images.sum()
        self.log.append("rounds", round=r, step=(r + 1) * cfg.fed.K, lr=cfg.lr_at_round(r), wall_time=wall_time,
                        round_time=round_time, images_per_s=images / round_time,
                        bytes_moved=sum(moved.values()), bytes_up=moved["up"], bytes_down=moved["down"],
                        bytes_intra=moved["intra"], loss=stats.loss, party_images_per_s=party_ips,
                        **self.check.log_columns(len(self.parties)), **self.side.round_columns())
        note = self.side.progress_note()
        if self.privacy:
            self.log.append("privacy", **self.privacy.row(r))
            note = f"{note}  {self.privacy.note()}" if note else self.privacy.note()
        if self.influence:
            self.log.append("influence", **self.influence.last)
        for table, names in self.party_tables.items():
            if stats.columns and any(name in stats.columns for name in names):
                nothing = np.full(len(self.parties), np.nan)
                self.log.append(table, round=r, **{name: stats.columns.get(name, nothing) for name in names})
        if self.classes.row:
            self.log.append("classes", **self.classes.row)
        extra = self.algorithm.classes.note(self.algo_state)
        note = f"{note}  {extra}" if note and extra else note or extra
        self.progress.line(r, stats.loss, images / round_time, wall_time, note=note)
        if stats.first_step_s is not None:
            self.log.record_first_steps(r, dict(zip(self.parties, stats.first_step_s.tolist())))
        bad = dict(zip(self.parties, stats.bad_records.tolist()))
        if stats.bad_records.any() and bad != self.bad_records:
            self.bad_records = bad
            self.log.record_bad_records(self.bad_records)

    def checkpoint_parts(self, wall_time: float) -> dict:
        """The server's part of a checkpoint (fedmpi.store.checkpoint): Θ, the rule's state, w, and what the side
        work and the exchange keep (FV's search; the cross-device sampler and clients' states)."""
        self.side.flush_evaluations()
        tree = {"theta": self.theta, "algorithm": self.algo_state, "wall_time": wall_time,
                "side_work": self.side.state_dict(), "exchange": self.exchange.state_dict(),
                "aggregator": self.aggregator.state_dict(),
                "config": to_yaml(self.cfg), "rng": capture_rng()}
        if self.w is not None:
            tree["w"] = self.w
        return {SERVER_PART: tree}

    def load_checkpoint(self, folder) -> int:
        """Take the state of a checkpoint written by `checkpoint_parts` (an earlier format is read as today's,
        store/upgrade.py); returns the round to continue at."""
        saved = upgrade_server_part(read_part(folder / SERVER_PART))
        copy_into(self.theta, saved["theta"], "theta")
        copy_into(self.algo_state, saved["algorithm"], "algorithm")
        if self.w is not None:
            self.w = saved["w"].to(self.w)
        self.side.load_state_dict(saved["side_work"])
        self.exchange.load_state_dict(saved["exchange"])
        if saved.get("aggregator"):          # a stateless aggregator (or an earlier format) keeps none
            self.aggregator.load_state_dict(saved["aggregator"])
        self.state.write(self.theta)
        self.elapsed_before = float(saved["wall_time"])
        restore_rng(saved["rng"])
        return int(saved["_attrs"]["round"])

    def finish(self, preempted: bool = False) -> None:
        cfg = self.cfg
        if cfg.run.save_final and not preempted:
            torch.save({"theta": self.theta.cpu().clone(), "n_trainable": self.state.n_trainable,
                        "keys": [k for k in self.backbone.state_dict()]}, cfg.run.save_final)
        self.side.finish()
        self.log.close()
        skipped = ("  bad records skipped: " + ", ".join(f"{k} {v}" for k, v in self.bad_records.items()) + "\n"
                   if self.bad_records else "")
        privacy = self.privacy.summary() if self.privacy else ""
        privacy += self.algorithm.classes.summary(self.algo_state)
        self.progress.summary(self.run_dir / "log.h5", extra=skipped + privacy + self.side.summary())

