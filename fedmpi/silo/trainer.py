"""A party's trainer rank: the local steps of a round (the method's local objective: fed.K steps of the margin
head by default) on its shard of the party's data (the party's mean gradient over its group), the party's private
classifier with local momentum (eq. 1-2), the backbone rule's step (PFM eq. 3, or local momentum SGD), then the
round's exchange with the server and the class part's payloads."""
from __future__ import annotations

import time
from pathlib import Path

import torch

from fedmpi import comm
from fedmpi.algorithms import LocalRound, views
from fedmpi.core.build import RunParts
from fedmpi.core.context import Context
from fedmpi.core.driver import drive
from fedmpi.core.trainer_loop import run_trainer_rounds
from fedmpi.core.schedule import evaluation_due
from fedmpi.silo.attack import party_attack, scale_update
from fedmpi.silo.classes import PartyKit
from fedmpi.silo.exchange import leader_upload, receive_global, report as send_statistics
from fedmpi.silo.party_checkpoint import PartyCheckpoint
from fedmpi.silo.local_objective import party_training
from fedmpi.silo.party_parts import exchange_buffers, party_head, rule_state, step_parts
from fedmpi.silo.party_gradients import party_model
from fedmpi.silo.precision import Precision
from fedmpi.silo.step_speed import StepSpeed
from fedmpi.models.bn_groups import normalise_in_groups
from fedmpi.store.checkpoint import Checkpointer
from fedmpi.layout import rank_batch
from fedmpi.silo.party_data import open_party_sets
from fedmpi.silo.personal import PersonalEvaluation


class Trainer:
    """A trainer rank of its party: `cfg` the run's config, `ctx` where this rank stands (its party, groups,
    control channel, node share), `parts` the rule and the model it trains (core/build.py). Every part of the
    method is called every round: the backbone rule's hooks, the local objective's, the class part's transport."""

    def __init__(self, cfg, ctx: Context, parts: RunParts):
        self.cfg, self.rank, self.groups, self.control = cfg, ctx.rank, ctx.groups, ctx.control
        self.device, self.dtype = parts.device, parts.dtype
        self.party = ctx.layout.party_of(ctx.rank)
        self.is_leader = ctx.rank == self.party.leader
        self.dataset, heldout = open_party_sets(self.party, cfg.data)
        self.backbone = parts.model
        self.batch_size = rank_batch(cfg, self.party.name)
        normalise_in_groups(self.backbone, self.batch_size, cfg.model.bn_batch)
        self.speed = StepSpeed(cfg, self.device)
        self.speed.prepare(self.backbone)
        self.state = parts.state
        self.algorithm = parts.rule
        self.training = parts.rule.training
        self.node = ctx.node_share   # None: this rank holds its own copy of what its party's ranks share
        self.keeps = self.node is None or self.node.keeps
        self.down, self.up = exchange_buffers(self.state, self.algorithm, self.is_leader, self.node, self.speed,
                                              self.device, self.dtype)
        self.global_theta = self.down.theta
        self.attack = party_attack(cfg, self.party.name)      # scale 1.0, no rows short: an honest party
        # the leader's upload, masked under fed.secure_aggregation (core/secure_participant.py)
        self.uploads = (leader_upload(cfg, ctx.layout, self.groups.leaders, self.control, self.up.flat.numel(),
                                      self.state.numel) if self.is_leader else None)
        self.take_global()
        group = self.groups.party
        self.precision = Precision(cfg.optim.amp, self.device, group=group, weight_cache=not self.speed.graphs)
        self.speed.capture(self.backbone, self.state, self.batch_size, cfg.data.image_size, self.precision.autocast)
        self.model, party_gradients = party_model(self.backbone, self.state.trainable, group, cfg.run, self.device)
        head = party_head(cfg, self.party, self.dataset, self.training, group, self.device, self.dtype)
        self.classifier = head.classifier
        self.forward = self.speed.compiled(self.model)
        self.loss = self.speed.compiled(self.classifier) if group is None else self.classifier
        self.objective = self.training.objective(self.algorithm.options, party_training(
            cfg, self.party, self.rank, self.groups, head, self.backbone, self.state, self.global_theta,
            self.dataset, self.batch_size, self.speed, parts.new_model, self.device, self.dtype))
        self.algo_state, self.previous_global = rule_state(self.algorithm, self.state.trainable, self.node,
                                                           self.down.trainable)
        self.algo_state.update(self.objective.state())     # kept, checkpointed and restored with the rule's
        self.stepped = step_parts(self.objective, self.classifier, party_gradients, group, cfg.optim,
                                  self.speed.fused)
        self.classifier_opt = self.stepped.classifier_optimizer
        self.personal_evaluation = (PersonalEvaluation(cfg, ctx.layout, self.party, self.dataset, heldout,
                                                       self.device, self.dtype)
                                    if heldout is not None and self.is_leader else None)
        self.steps = cfg.fed.K           # the local steps of the current round
        self.round_columns: dict = {}    # the round's numbers for the log (the objective's, the personal metrics)
        # what of the party's class embeddings leaves it each round (the class part's transport, silo/classes.py)
        self.classes = self.algorithm.classes.party_side(PartyKit(
            self.party, self.rank, self.groups, self.classifier, self.classifier_opt, self.algo_state,
            len(ctx.layout.parties), self.device, self.dtype, short_rows=self.attack.short_rows))
        self.saved = PartyCheckpoint(self.party, self.rank, self.classifier, self.classifier_opt, self.precision,
                                     self.algo_state, self.algorithm.global_state, self.node, self.classes,
                                     cfg.run.seed, cfg.model.classifier)

    def run(self, start_round: int = 0, checkpointer: Checkpointer | None = None) -> int:
        return run_trainer_rounds(self, self.cfg.rounds, self.cfg.lr_at_round, start_round, checkpointer)

    def start(self, start_round: int) -> None:
        self.objective.start(start_round)

    def prepare(self, r: int, lr: float) -> None:
        self.set_lr(lr)
        self.classes.prepare(r)
        if self.is_leader:
            self.uploads.begin(r, [self.party.index], self.down.flat)
        if self.training.fresh_optimizer:   # a new local optimizer every round: no momentum carried over
            for opt in self.stepped.optimizers:
                opt.reset()
            for buffer in self.algo_state.get("momentum", ()):
                buffer.zero_()

    def set_lr(self, lr: float) -> None:
        for opt in self.stepped.optimizers:
            for group in opt.param_groups:
                group["lr"] = lr

    def train(self, r: int, lr: float) -> tuple[LocalRound, float]:
        """The round's local steps (the local objective's: fed.K by default); (what the rule's steps saw, the mean
        loss). A loss that is not finite goes to the server like any other: it stops the run there, in one line
        naming the uploads that caused it (aggregation/upload_check.py), rather than every party's rank blaming
        its own party."""
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        rnd = self.local_round(lr)
        with comm.naming_failures(f"round {r + 1}: party {self.party.name}'s local steps"):
            started = time.perf_counter()
            plan = self.objective.begin_round(r, lr)       # after the global Θ arrived: FedFR's hard negatives
            self.round_columns = {**self.objective.columns(), "begin_round_s": time.perf_counter() - started}
            rnd.K = self.steps = plan.steps
            for k in range(plan.steps):
                images, labels = next(plan.batches)
                rnd.step, rnd.lr = k, self.objective.lr(k)
                self.set_lr(rnd.lr)
                loss_sum += self.step(images.to(self.dtype), labels, rnd)
        return rnd, float(loss_sum) / plan.steps

    def report(self, r: int, trained, seconds: float) -> None:
        first_step = self.speed.timer.seconds if self.speed.timer else None
        self.speed.timer = None     # said once, in the round that compiled
        send_statistics(self.control, r, {"party": self.party.index, "loss": trained[1], "seconds": seconds,
                                          "images": self.steps * self.batch_size,
                                          "bad_records": self.bad_records(), "first_step_s": first_step,
                                          "columns": self.round_columns if self.is_leader else {}})
        self.round_columns = {}

    def checkpoint_parts(self) -> dict:
        return self.saved.parts()

    def load_checkpoint(self, folder) -> int:
        return self.saved.load(folder)

    def bad_records(self) -> int:
        """Records this rank skipped (skip_bad); those dropped when the set was opened count once per party."""
        return self.dataset.bad_records - (0 if self.is_leader else self.dataset.open_bad)

    def local_round(self, lr: float) -> LocalRound:
        """What the rule's local steps see this round: Θ at the round's start, the down payloads, the up
        payloads to fill (all parameter-shaped views into the exchange's buffers)."""
        params = self.state.trainable
        return LocalRound(lr=lr, K=self.cfg.fed.K, global_params=views(self.down.trainable, params),
                          down=self.down.as_params(params), up=self.up.as_params(params))

    def step(self, images, labels, rnd: LocalRound) -> torch.Tensor:
        for gradients in self.stepped.averaged:
            gradients.attach()
        timer = self.speed.timer
        if timer:
            timer.start()
        with self.precision.autocast():
            images = self.speed.images(images)
            embeddings = self.forward(images)
            loss = self.objective.loss(images, embeddings, labels, self.loss(embeddings, labels))
        self.precision.backward(loss)
        for gradients in self.stepped.averaged:
            gradients.average()
        self.classifier.sync_grads()
        if self.precision.unscale_and_check([*self.state.trainable, *self.stepped.extra]):
            with torch.no_grad():
                grads = [p.grad for p in self.state.trainable]
                self.algorithm.local_step(self.state.trainable, grads, rnd, self.algo_state)
            for opt in self.stepped.optimizers:
                opt.step()
        for p in (*self.state.trainable, *self.stepped.extra):
            p.grad = None
        if timer and timer.stop(self.device) is not None:
            print(f"party {self.party.name} rank {self.rank}: first step {timer.seconds:.1f} s "
                  f"({self.speed.describe()}: compiling or capturing)", flush=True)
        return loss.detach().to(torch.float64)

    def exchange(self, r: int, trained) -> None:
        """Send θ_i and the rule's up payloads (leader) and the class payload, receive the new global payload,
        rebuild the rule's state (PFM's M, eq. 6), take the server's reply to the class payload."""
        rnd = trained[0]
        with comm.naming_failures(f"round {r + 1}"):
            with torch.no_grad():
                self.algorithm.end_round(self.state.trainable, rnd, self.algo_state)
                self.objective.end_round(r)
            if self.node:
                self.node.wait_for_party("the party's local steps")   # Θ_{r-1} and M are read no more
            previous = self.previous_global
            if previous is not None and self.keeps:
                previous.copy_(self.down.trainable)
            if self.is_leader:
                self.upload(r)
            self.classes.upload(r)
            if self.personal_evaluation is not None and evaluation_due(r, self.cfg.eval.every, self.cfg.rounds):
                self.round_columns.update(self.personal_evaluation(self.backbone, self.objective.personal))
            rebuild = None if previous is None else (
                lambda: self.algorithm.on_global(previous, self.down.trainable, rnd.lr, self.algo_state))
            self.take_global(rebuild)
            self.classes.download(r)

    def upload(self, r: int) -> None:
        """The leader's θ_i, up payloads and the training's upload columns (objective.<column>(): FedFR's party
        weight, which the server aggregates with), in one buffer."""
        self.state.read(self.up.theta)
        if self.attack.scale != 1.0:
            scale_update(self.up.trainable, self.down.trainable, self.attack.scale)
        for name, slot in self.up.columns.items():
            slot.fill_(getattr(self.objective, name)())
        self.uploads.each(self.up.flat)
        self.uploads.end()

    def take_global(self, then=None) -> None:
        """The new global payload (and then(), which rebuilds the rule's global_state from it) on the keeper of the
        party's ranks on this node, or on every rank where nothing is shared; then every rank's model is Θ."""
        if self.keeps:
            receive_global(self.down.flat, self.party, self.rank, self.groups, self.node)
            if then is not None:
                then()
        if self.node:
            self.node.wait_for_party("the global payload")
        self.state.write(self.global_theta)


def run_trainer(cfg, ctx: Context, parts: RunParts, run_dir, resume=None) -> int:
    if cfg.run.compile != "off":   # before the first compilation: a requeued job finds what its first start compiled
        from fedmpi.models.speed import use_compile_cache

        use_compile_cache(cfg.run.compile_cache or Path(run_dir) / "compile_cache")
    return drive(Trainer(cfg, ctx, parts), cfg, ctx, run_dir, resume)
