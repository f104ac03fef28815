"""A trainer rank of a cross-device run: each round it receives its share of the sampled clients (and their
states, for a rule that keeps per-client state), trains them one after another from the global payload, sends
the states back and joins the reduction of sum_k n_k [theta_k | up payloads] to the server (then, for a summary
part, its clients' summaries: album_clusters.py); then it takes the next global payload (and the pool of relayed
summaries) and lets the rule rebuild its global_state from it (PFM's M)."""
from __future__ import annotations

from fedmpi.core.build import RunParts
from fedmpi.core.context import Context
from fedmpi.crossdevice.client_data import open_clients
from fedmpi.crossdevice.album_clusters import ClientKit
from fedmpi.crossdevice.client_heads import client_head
from fedmpi.crossdevice.exchange import TrainerSide, client_group
from fedmpi.crossdevice.rank_uploads import rank_uploads
from fedmpi.crossdevice.local_training import LocalTrainer
from fedmpi.crossdevice.evaluation_shares import TrainerShare
from fedmpi.core.trainer_loop import run_trainer_rounds
from fedmpi.core.driver import drive
from fedmpi.store.checkpoint import copy_into, read_manifest, read_part

# The rule's global_state and the received pool of clusters (the same on every trainer rank), written by the first
# trainer rank.
TRAINER_PART = "trainers.h5"


class ClientTrainer:
    def __init__(self, cfg, ctx: Context, parts: RunParts):
        self.cfg = cfg
        trainers = ctx.layout.trainer_ranks
        self.trainer_side = TrainerSide(ctx.rank, trainers, client_group(trainers), ctx.control, parts.device)
        self.is_first = ctx.rank == trainers[0]
        # the round's learning rate, this rank's clients and their states (None: the rule keeps none), set by prepare
        self.lr, self.clients, self.states = 0.0, [], None
        self.state = parts.state
        data = open_clients(cfg)
        # what the method's class part has the clients minimise and send (album_clusters.py)
        self.classes = parts.rule.classes.party_side(ClientKit(cfg, parts.model, data, self.trainer_side,
                                                               parts.device, parts.dtype))
        self.local = LocalTrainer(parts.model, parts.state, parts.rule, data,
                                  epochs=cfg.clients.epochs, batch_size=cfg.optim.batch_size, seed=cfg.run.seed,
                                  augment=cfg.clients.augment, device=parts.device, dtype=parts.dtype,
                                  clip=cfg.fed.dp.clip if cfg.fed.dp.enabled else None,
                                  vectorised=cfg.clients.vectorised(cfg, parts.device.type),
                                  head=client_head(cfg, parts.model, data) if self.classes.head is None
                                  else self.classes.head)
        self.previous = self.local.down.theta.clone()
        # each client's upload, or their sum; masked under fed.secure_aggregation (core/secure_participant.py)
        self.uploads = rank_uploads(cfg, self.trainer_side, parts.every_upload, self.local.data.sizes(),
                                    self.state.numel, self.local.up.flat.numel())
        # the CIFAR clients' test accuracy is scored on every rank (the face clients' verification on the server)
        self.test_share = None if cfg.clients.face_clients else TrainerShare(cfg, ctx.rank, trainers, ctx.control,
                                                                             parts, data)

    def run(self, start_round: int = 0, checkpointer=None) -> int:
        # a client's batch order comes from (seed, round, client) and its state lives with the server
        return run_trainer_rounds(self, self.cfg.rounds, self.cfg.lr_at_round, start_round, checkpointer)

    def start(self, start_round: int) -> None:
        self.trainer_side.receive_global(self.local.down.flat)

    def prepare(self, r: int, lr: float) -> None:
        """This rank's clients of the round, and their states for a rule that keeps per-client state."""
        self.lr = lr
        self.clients = self.trainer_side.receive_assignment(r)
        self.classes.prepare(r)
        self.uploads.begin(r, self.clients, self.local.down.flat)
        layout = self.local.layout
        self.states = self.trainer_side.receive_states(len(self.clients), layout.initial) if layout else None

    def train(self, r: int, lr: float) -> tuple:
        """The clients one after another: (sum n_k [theta_k | up payloads] | sum n_k, the round's statistics)."""
        return self.local.train_round(self.local.down.flat, self.clients, r, lr, self.states, self.uploads.each)

    def exchange(self, r: int, trained) -> None:
        ex, local = self.trainer_side, self.local
        if self.states:
            ex.send_states(self.states)
        self.uploads.end(trained[0])
        self.classes.upload(r)
        self.previous.copy_(local.down.theta)
        ex.receive_global(local.down.flat)
        self.classes.download(r)
        local.new_global(self.previous, self.lr)

    def report(self, r: int, trained, seconds: float) -> None:
        stats = trained[1]
        stats["seconds"] = seconds
        self.trainer_side.send_stats(r, stats)
        if self.test_share:
            self.test_share.round_end(r, self.local.down.theta)

    def checkpoint_parts(self) -> dict:
        tree = {**({"algorithm": self.local.shared} if self.local.shared else {}), **self.classes.state()}
        if not tree or not self.is_first:
            return {}
        return {TRAINER_PART: tree}

    def load_checkpoint(self, folder) -> int:
        kept = self.classes.state()
        if self.local.shared or kept:
            saved = read_part(folder / TRAINER_PART, ("algorithm", *kept))
            if self.local.shared:
                copy_into(self.local.shared, saved["algorithm"], "algorithm")
            if kept:
                copy_into(kept, {key: saved[key] for key in kept}, "trainers")
        return int(read_manifest(folder)["round"])


def run_client_trainer(cfg, ctx: Context, parts: RunParts, run_dir, resume=None) -> int:
    return drive(ClientTrainer(cfg, ctx, parts), cfg, ctx, run_dir, resume)
