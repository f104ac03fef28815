"""A party's trainer rank: K local steps per round on its shard of the party's data (the party's mean
gradient over its group), the party's private classifier with local momentum (eq. 1-2), the backbone step of
the chosen rule (PFM eq. 3, or local momentum SGD), then the round's exchange with the server."""
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
from fedmpi.core.payloads import Payloads
from fedmpi.core.schedule import evaluation_due
from fedmpi.silo.attack import attack_scale, scale_update
from fedmpi.silo.classes import PartyClasses
from fedmpi.silo.exchange import receive_global, report as send_statistics, send_local, send_weight
from fedmpi.silo.secure_upload import SecureUpload
from fedmpi.silo.party_gradients import COMPRESSION, PartyGradients, party_ddp
from fedmpi.silo.precision import Precision
from fedmpi.silo.step_speed import StepSpeed
from fedmpi.models.bn_groups import normalise_in_groups
from fedmpi.models.sgd import MomentumSGD
from fedmpi.store.checkpoint import (Checkpointer, capture_rng, copy_into, party_part, read_part,
                                     restore_rng)
from fedmpi.layout import rank_batch
from fedmpi.silo.local_objective import open_public, party_training
from fedmpi.silo.party_data import batch_stream, open_party_sets
from fedmpi.silo.personal import PersonalEvaluation


class Trainer:
    """A trainer rank of its party: `cfg` the run's config, `ctx` where this rank stands (its party, groups,
    control channel, node share), `parts` the rule and the model it trains (core/build.py)."""

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
        self.node = ctx.node_share   # None: this rank holds its own copy of what its party's ranks share
        self.keeps = self.node is None or self.node.keeps
        self.down = Payloads(self.state, self.algorithm.down, self.device, self.dtype,   # [Θ | down payloads]
                             zeros=self.node.zeros if self.node else None)
        # [θ_i | up payloads]; θ_i only on the leader, the one rank of the party that sends it
        self.up = Payloads(self.state, self.algorithm.up, self.device, self.dtype, with_theta=self.is_leader)
        if self.is_leader and self.device.type == "cpu" and not self.speed.channels_last:
            self.state.live_in(self.up.theta)   # the leader's model is its upload's θ_i: one copy, not two
        self.global_theta = self.down.theta
        self.attack = attack_scale(cfg, self.party.name)      # 1.0: an honest party
        self.secure = SecureUpload.build(cfg, ctx, self.party, self.state.numel) if self.is_leader else None
        self.take_global()
        group = self.groups.party
        o = cfg.optim
        self.precision = Precision(o.amp, self.device, group=group, weight_cache=not self.speed.graphs)
        self.speed.capture(self.backbone, self.state, self.batch_size, cfg.data.image_size, self.precision.autocast)
        self.model, self.party_gradients = self._party_model(group)
        # the public identities' set, every party's, for a rule that trains over them too (their classifier rows
        # follow the party's own)
        public = open_public(cfg) if self.algorithm.public_identities else None
        self.classifier_seed = cfg.run.seed + 1 + self.party.index
        self.classifier = self._build_classifier(public.num_classes if public is not None else 0).to(self.device)
        self.forward = self.speed.compiled(self.model)
        self.loss = self.speed.compiled(self.classifier) if group is None else self.classifier
        self.classifier_opt = MomentumSGD(self.classifier.parameters(), lr=o.lr, momentum=o.momentum,
                                          weight_decay=o.weight_decay, fused=self.speed.fused)  # eq. 1-2
        self.algo_state = self.algorithm.init_trainer_state(self.state.trainable)
        if self.node:   # what on_global rebuilds from Θ is the same on every rank of the party: one copy per node
            self.algo_state.update({key: self.node.like(self.algo_state[key]) for key in self.algorithm.global_state})
        # Θ's trainable values before the next global model arrives, for on_global (None: the rule reads none)
        self.previous_global = self.algorithm.previous_global(self.algo_state, self.down.trainable)
        # the rule's own local training (FedFR), its state kept with the rule's trainer state, its parameters
        # stepped as the classifier's are
        self.objective = self.algorithm.local_objective(party_training(self, public, parts.new_model))
        self.objective_opt = self.objective_gradients = None
        if self.objective is not None:
            self.algo_state.update(self.objective.state())
            if self.objective.parameters():
                self.objective_opt = MomentumSGD(self.objective.parameters(), lr=o.lr, momentum=o.momentum,
                                                 weight_decay=o.weight_decay)
                # replicated on the party's ranks: their gradients become the party's mean, as the backbone's
                if group is not None:
                    self.objective_gradients = PartyGradients(self.objective.parameters(), group)
        # the gradients a multi-rank party averages on its own (DDP averages a GPU party's backbone in backward)
        self.averaged = [g for g in (self.party_gradients, self.objective_gradients) if g is not None]
        self.personal_evaluation = (PersonalEvaluation(cfg, ctx.layout, self.party, self.dataset, heldout,
                                                       self.device, self.dtype)
                                    if heldout is not None and self.is_leader else None)
        self.steps = cfg.fed.K           # the local steps of the current round
        self.round_columns: dict = {}    # the round's numbers for the log (the objective's, the personal metrics)
        # what of the party's class embeddings leaves it each round (a rule with a class payload; silo/classes.py)
        self.classes = (PartyClasses(self.algorithm, self.party, self.rank, self.groups, self.classifier,
                                     self.classifier_opt, self.algo_state, len(ctx.layout.parties), self.device,
                                     self.dtype) if self.algorithm.class_payload else None)

    def _party_model(self, group):
        """(the module to run forward, the gradient averager). One rank: neither. GPU: DDP, which overlaps the
        all-reduce with backward (its torch._dynamo import is small next to a GPU run). CPU: one all-reduce after
        backward (silo/party_gradients.py), without DDP's import of torch._dynamo (its cost per rank: docs/PERFORMANCE.md)."""
        if group is None:
            return self.backbone, None
        compression = COMPRESSION[self.cfg.run.ddp_compression]
        if self.device.type == "cuda":
            return party_ddp(self.backbone, group, self.cfg.run.ddp_bucket_mb, compression), None
        return self.backbone, PartyGradients(self.state.trainable, group, compression)

    def _build_classifier(self, extra_classes: int = 0):
        """The party's margin classifier over its identities (and `extra_classes` rows after them: the public
        identities of a rule that trains over them)."""
        from fedmpi.models.classifier import build_classifier

        m, cfg = self.cfg.model, self.cfg
        return build_classifier(self.dataset.num_classes + extra_classes, m.embedding_size, kind=m.head,
                                scale=m.scale, margin=cfg.margin, group=self.groups.party, mode=m.classifier,
                                sample_rate=m.sample_rate, seed=self.classifier_seed, dtype=self.dtype)

    def run(self, start_round: int = 0, checkpointer: Checkpointer | None = None) -> int:
        return run_trainer_rounds(self, self.cfg.rounds, self.cfg.lr_at_round, start_round, checkpointer)

    def start(self, start_round: int) -> None:
        """The batch stream from the resumed step (the first global payload came in __init__); a local objective's
        rounds each have a stream of their own."""
        cfg = self.cfg
        if self.objective is None:
            self.batches = batch_stream(self.dataset, self.party, self.rank, cfg, start_round * cfg.fed.K,
                                        self.device)

    def prepare(self, r: int, lr: float) -> None:
        self.set_lr(lr)
        if self.algorithm.fresh_local_optimizer:   # a new local optimizer every round: no momentum carried over
            for opt in (self.classifier_opt, self.objective_opt):
                if opt is not None:
                    opt.reset()
            for buffer in self.algo_state.get("momentum", ()):
                buffer.zero_()

    def set_lr(self, lr: float) -> None:
        for opt in (self.classifier_opt, self.objective_opt):
            for group in opt.param_groups if opt is not None else ():
                group["lr"] = lr

    def begin_round(self, r: int, lr: float) -> None:
        """A local objective's round: its data (after the global Θ arrived: FedFR's hard negatives), its steps and
        its own stream of batches."""
        started = time.perf_counter()
        plan = self.objective.begin_round(r, lr)
        self.steps = plan.steps
        self.batches = batch_stream(plan.dataset, self.party, self.rank, self.cfg, 0, self.device, seed=plan.seed,
                                    steps_per_pass=plan.steps_per_pass)
        self.round_columns = {**self.objective.columns(), "begin_round_s": time.perf_counter() - started}

    def train(self, r: int, lr: float) -> tuple[LocalRound, float]:
        """The round's local steps (fed.K, or the local objective's); (what the rule's steps saw, the mean loss). A
        loss that is not finite goes to the server like any other: it stops the run there, in one line naming the
        uploads that caused it (aggregation/upload_check.py), rather than every party's rank blaming its own party."""
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        rnd = self.local_round(lr)
        with comm.naming_failures(f"round {r + 1}: party {self.party.name}'s local steps"):
            if self.objective is not None:
                self.begin_round(r, lr)
            rnd.K = K = self.steps
            for k in range(K):
                images, labels = next(self.batches)
                rnd.step = k
                if self.objective is not None:
                    rnd.lr = self.objective.lr(k)
                    self.set_lr(rnd.lr)
                loss_sum += self.step(images.to(self.dtype), labels, rnd)
        return rnd, float(loss_sum) / K

    def report(self, r: int, trained, seconds: float) -> None:
        first_step = self.speed.timer.seconds if self.speed.timer else None
        self.speed.timer = None     # said once, in the round that compiled
        send_statistics(self.control, r, {"party": self.party.index, "loss": trained[1], "seconds": seconds,
                                          "images": self.steps * self.batch_size,
                                          "bad_records": self.bad_records(), "first_step_s": first_step,
                                          "columns": self.round_columns if self.is_leader else {}})
        self.round_columns = {}

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
        for gradients in self.averaged:
            gradients.attach()
        timer = self.speed.timer
        if timer:
            timer.start()
        objective = self.objective
        extra = objective.parameters() if objective is not None else []
        with self.precision.autocast():
            images = self.speed.images(images)
            embeddings = self.forward(images)
            loss = self.loss(embeddings, labels)
            if objective is not None:
                loss = objective.loss(images, embeddings, labels, loss)
        self.precision.backward(loss)
        for gradients in self.averaged:
            gradients.average()
        self.classifier.sync_grads()
        if self.precision.unscale_and_check([*self.state.trainable, *self.classifier.parameters(), *extra]):
            with torch.no_grad():
                grads = [p.grad for p in self.state.trainable]
                self.algorithm.local_step(self.state.trainable, grads, rnd, self.algo_state)
            self.classifier_opt.step()
            if self.objective_opt is not None:
                self.objective_opt.step()
        for p in (*self.state.trainable, *self.classifier.parameters(), *extra):
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
                if self.objective is not None:
                    self.objective.end_round(r)
            if self.node:
                self.node.wait_for_party("the party's local steps")   # Θ_{r-1} and M are read no more
            previous = self.previous_global
            if previous is not None and self.keeps:
                previous.copy_(self.down.trainable)
            if self.is_leader:
                self.state.read(self.up.theta)
                if self.attack != 1.0:
                    scale_update(self.up.trainable, self.down.trainable, self.attack)
                if self.algorithm.weighs_parties:   # the party's weight first: the server aggregates with it
                    send_weight(self.control, r, self.objective.weight())
                if self.secure:   # masked, over the secure-aggregation session (silo/secure_upload.py)
                    self.secure.upload(r, self.up.flat, self.down.flat)
                else:
                    send_local(self.up.flat, self.groups.leaders)
            if self.classes:
                self.classes.upload(r)
            if self.personal_evaluation is not None and evaluation_due(r, self.cfg.eval.every, self.cfg.rounds):
                personal = self.objective.personal if self.objective is not None else (lambda f: f)
                self.round_columns.update(self.personal_evaluation(self.backbone, personal))
            rebuild = None
            if previous is not None:
                def rebuild():
                    self.algorithm.on_global(previous, self.down.trainable, rnd.lr, self.algo_state)
            self.take_global(rebuild)
            if self.classes:
                self.classes.download(r)

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

    def checkpoint_parts(self) -> dict:
        """This rank's part of a checkpoint (fedmpi.store.checkpoint): its classifier shard and the shard's
        optimizer state, the loss scale, its RNGs; the leader also the rule's trainer state (the same on every
        rank of the party: PFM's M, local momentum), which never leaves the party."""
        tree = {"classifier": self.classifier.state_dict(), "classifier_optimizer": self.classifier_opt.state_dict(),
                "precision": self.precision.state_dict(),
                "rng": capture_rng()}
        if self.is_leader:
            tree["algorithm"] = self.algo_state
        return {party_part(self.party.name, self.party.ranks.index(self.rank)): tree}

    def load_checkpoint(self, folder) -> int:
        """Take this rank's state from a checkpoint written by `checkpoint_parts`, by this party on this rank count
        or on another (fedmpi/relayout: the classifier's blocks re-split, generators derived); returns the round
        to continue at (the global Θ came with the server's first broadcast)."""
        from fedmpi.relayout.party_state import relaid_part, saved_rank_count, seed_generators, seed_of
        from fedmpi.store.manifest import read_manifest

        index, ranks = self.party.ranks.index(self.rank), len(self.party.ranks)
        saved_ranks = saved_rank_count(read_manifest(folder), self.party.name) or ranks
        if saved_ranks == ranks:
            saved = read_part(folder / party_part(self.party.name, index))
        else:
            saved = relaid_part(folder, self.party.name, saved_ranks, ranks, index, self.cfg.model.classifier)
        self.classifier.load_state_dict(saved["classifier"])
        self.classifier_opt.load_state_dict(saved["classifier_optimizer"])
        self.precision.load_state_dict(saved["precision"])
        leader = saved if "algorithm" in saved else read_part(folder / party_part(self.party.name, 0), ("algorithm",))
        targets = self.algo_state
        if not self.keeps:   # the keeper restores what the party's ranks on its node share
            targets = {k: torch.empty_like(v) if k in self.algorithm.global_state else v for k, v in targets.items()}
        copy_into(targets, leader["algorithm"], "algorithm")
        if self.classes:
            self.classes.restored()
        if self.node:
            self.node.wait_for_party("the rule's state from the checkpoint")
        rounds_done = int(saved["_attrs"]["round"])
        if saved_ranks == ranks:
            restore_rng(saved["rng"])
        else:
            seed_generators(seed_of(self.cfg.run.seed, self.party.index, rounds_done, index))
        return rounds_done


def run_trainer(cfg, ctx: Context, parts: RunParts, run_dir, resume=None) -> int:
    if cfg.run.compile != "off":   # before the first compilation: a requeued job finds what its first start compiled
        from fedmpi.models.speed import use_compile_cache

        use_compile_cache(cfg.run.compile_cache or Path(run_dir) / "compile_cache")
    return drive(Trainer(cfg, ctx, parts), cfg, ctx, run_dir, resume)
