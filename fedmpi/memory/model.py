"""Each rank's peak memory for a layout, from the config alone (no torch, nothing built): the model bench/memory.py
measures, part by part (docs/ARCHITECTURE.md, "Memory per rank", says why each part is kept).

A rank's parts, in bytes (b: bytes per value of run.dtype; D: the backbone's flat state, n of it trainable):
  torch        anonymous memory of `import torch` (the CUDA build's or the CPU build's)
  runtime      the rest a rank holds before its rounds: interpreter, MPI and gloo, Python objects, the data index
  model        D·b, and the gradients n·b during a step (a multi-rank party's gradient buffer on CPU, n·b)
  payloads     what a trainer receives and sends: the global payload (D + k_down·n)·b, on CPU once per party and
               node (node-shared, counted on the node, not the rank); the up payloads k_up·n·b (and θ_i's D·b
               on a GPU leader: on CPU the leader's model lives in its upload; its c upload columns c·b)
  rule state   the rule's trainer state (PFM's M: n, node-shared on CPU; local momentum, SCAFFOLD's c_i: n each)
  classifier   the party's classes on this rank x embedding: weights, momentum, gradients
  activations  a step's saved activations and transient buffers, per image x the batch (ACTIVATION_FACTOR x the
               values of every feature map of the forward pass, in b-byte values), the logits, and
               STEP_TRANSIENT_MB whatever the batch
  workers      data.workers forked copies of the rank (WORKER_MB each)
  server       Θ and the down payloads, the uploads' rows with their columns (twice with FV: θ' is read while
               the next land), the mean of a rule with its own server update, the server optimizer's state
  validation   the hosted or dedicated validator's sets (decoded images, pairs x 2 x 3 x size²) and its
               backbone, and an evaluation batch's largest feature maps (no gradients)
On a GPU (run.device cuda) the tensors are the GPU's: model, payloads, rule state, classifier, activations, server
and validation then count against the GPU a rank runs on, the rest against its node.
The constants were measured with bench/memory.py on the demo, the 17-rank batch-8 headline and the 12-party layout
(CUDA build of torch 2.14.1, glibc malloc as fedmpi.run tunes it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace

from fedmpi.config.rules import algorithm_method
from fedmpi.layout import rank_batch
from fedmpi.memory.sizes import backbone_size, feature_map_values

MB = 1024 ** 2
TORCH_MB = {"cuda": 282.0, "cpu": 140.0}        # anonymous memory after `import torch`, by build
RUNTIME_MB = {"server": 60.0, "trainer": 50.0, "validator": 50.0}
ACTIVATION_FACTOR = 0.80                        # a step's peak over the forward's feature-map values (IR-18 112 px)
# glibc's default malloc keeps a step's freed activation buffers in its heap: IR-18 at 112 px, batch 8 adds
# ~600 MB at a step's peak against ~330 MB under the tuned settings (bench/malloc_step.py)
GLIBC_DEFAULTS_ACTIVATIONS = 600.0 / 330.0
STEP_TRANSIENT_MB = 25.0                        # what a step holds beyond them whatever the batch (allocator, logits)
EVAL_LIVE_MAPS = 3                              # no-grad embedding: a batch, its flip and the largest output live
WORKER_MB = 660.0                               # a forked DataLoader worker once Python touched its pages (CPU)
CUDA_CONTEXT_MB = 300.0                         # a CUDA context on its GPU
DTYPE_BYTES = {"float32": 4, "float64": 8}
CIFAR_CNN_VALUES = 1_756_426                     # McMahan's CNN at 32 px (models/cifar_cnn.py), all trainable


def client_states(cfg) -> tuple[int, float]:
    """A cross-device run's per-client states on the server (crossdevice/client_state.py, ClientStore): (the most
    clients it can come to hold: every client sampled at least once, at most population and rounds x the clients
    a round; bytes). The face clients' class embeddings are one dense table of all M clients' rows from the start
    (W: M x identities_per_client x d values) beside the rule's states of the IResNet's trainable values."""
    from fedmpi.config.clients import clients_per_round

    c, b = cfg.clients, DTYPE_BYTES[cfg.run.dtype]
    held = min(c.population, cfg.rounds * clients_per_round(c.population, c.fraction))
    tensors = len(algorithm_method(cfg).client_state)
    if not c.face_clients:
        return held, held * tensors * CIFAR_CNN_VALUES * b
    m = cfg.model
    _, trainable = backbone_size(m.backbone, m.width, m.embedding_size, cfg.data.image_size)
    rows = c.population * c.identities_per_client * m.embedding_size * b
    return c.population, held * tensors * trainable * b + rows     # the rows bound: the override is the population


@dataclass
class RankNeed:
    """One rank's estimated peak, by part (bytes): `host` against its node's memory, `gpu` against its GPU's."""
    rank: int
    role: str
    host: dict[str, float] = field(default_factory=dict)
    gpu: dict[str, float] = field(default_factory=dict)

    @property
    def host_total(self) -> float:
        return sum(self.host.values())

    @property
    def gpu_total(self) -> float:
        return sum(self.gpu.values())


@dataclass
class LayoutNeed:
    """Every rank's need and what a party's ranks on one node share once (CPU): {(party, node): bytes}."""
    ranks: list[RankNeed]
    shared: dict[tuple[str, str], float]
    shared_bytes_per_party: dict[str, float]

    def node_host(self, nodes: list[str]) -> dict[str, float]:
        """{node: bytes}: its ranks' host parts and each of its parties' shared copy."""
        out: dict[str, float] = {}
        for need in self.ranks:
            out[nodes[need.rank]] = out.get(nodes[need.rank], 0.0) + need.host_total
        for (_, node), value in self.shared.items():
            out[node] = out.get(node, 0.0) + value
        return out


def party_classes(cfg, party) -> int:
    """A party's identities (its classifier's classes) where the config says them: synthetic data; 0 otherwise."""
    total = 0
    for spec in party.specs:
        if spec.kind == "synthetic":
            total += math.ceil(spec.identities / spec.split_count)
    return total


def validation_image_bytes(cfg, sets: int) -> float:
    """Decoded validation images of `sets` synthetic-sized sets: pairs x 2 images x 3 x size² bytes, with their
    encoded copy (read at start, kept until first use: about a fifth of the decoded)."""
    pairs = 10 * cfg.data.val_pairs_per_fold
    return sets * pairs * 2 * 3 * cfg.data.image_size ** 2 * 1.2


def estimate(cfg, layout, device: str = "cpu", torch_build: str = "cuda", workers: int | None = None,
             tuned_malloc: bool = True) -> LayoutNeed:
    """Every rank's peak for `layout` under `cfg` on `device` (cpu | cuda); workers: DataLoader workers per trainer
    rank (None: what data.workers gives on that device); tuned_malloc: whether the ranks run under fedmpi.run's
    malloc settings (core/malloc.py) or glibc's defaults, whose heap keeps more of a step on the CPU."""
    from fedmpi.fv import assign_sets, fv_runs, needs_validation_sets

    s = _sizes(cfg, device, torch_build, workers)
    if not tuned_malloc and not s.gpu:
        s.activation_factor *= GLIBC_DEFAULTS_ACTIVATIONS
    base = lambda role: {"torch": TORCH_MB[torch_build] * MB, "runtime": RUNTIME_MB[role] * MB}
    validating = needs_validation_sets(cfg)
    dedicated = list(layout.validators)

    def validation(n_sets: int) -> float:
        return s.D * s.b + validation_image_bytes(cfg, n_sets) + s.eval_transient

    # the server
    P = len(layout.parties)
    D_up = s.D + s.k_up * s.n
    server = {"server": ((s.D + s.k_down * s.n) + P * (D_up + s.columns) * (2 if fv_runs(cfg) else 1)
                         + (0 if s.rule.averages_at_server() else D_up) + s.server_state * s.n) * s.b}
    if s.rule.classes.rows_to_server:   # W, its unit rows, its gradient; a block's cosines and exponentials
        C = sum(party_classes(cfg, p) for p in layout.parties)
        block = int(cfg.fed.options.get("block_rows", 2048))
        server["class embeddings"] = (3 * C * cfg.model.embedding_size + 2 * min(block, C) * C) * s.b
    if validating and not dedicated:
        server["validation"] = validation(len(cfg.data.val_sets))
    need = RankNeed(0, "server", base("server"))
    (need.gpu if s.gpu else need.host).update(server)
    ranks = [need]
    shared_per_party: dict[str, float] = {}
    for party in layout.parties:
        shared_per_party[party.name] = _add_party(ranks, cfg, party, s, base)
    for rank, names in zip(dedicated, assign_sets(list(cfg.data.val_sets), len(dedicated)) if dedicated else []):
        need = RankNeed(rank, "validator", base("validator"))
        (need.gpu if s.gpu else need.host)["validation"] = validation(len(names))
        ranks.append(need)
    if s.gpu:
        for need in ranks:
            need.gpu["cuda context"] = CUDA_CONTEXT_MB * MB
    shared: dict[tuple[str, str], float] = {}
    return LayoutNeed(ranks, shared, shared_per_party)


def _sizes(cfg, device: str, torch_build: str, workers: int | None) -> SimpleNamespace:
    """The figures every rank's estimate reads: the backbone's values (D, n trainable, b bytes each), its feature
    maps, the rule's tensors (what its parts declare), whether a party's ranks share a node's copy, workers."""
    m = cfg.model
    s = SimpleNamespace(m=m, b=DTYPE_BYTES[cfg.run.dtype], rule=algorithm_method(cfg), gpu=device == "cuda")
    s.D, s.n = backbone_size(m.backbone, m.width, m.embedding_size, cfg.data.image_size)
    s.values, largest = feature_map_values(m.backbone, m.width, m.embedding_size, cfg.data.image_size)
    s.k_up, s.k_down = len(s.rule.up), len(s.rule.down)
    s.columns = len(s.rule.training.upload_columns)
    s.trainer_state, s.server_state = s.rule.trainer_tensors, s.rule.server_tensors
    if cfg.fed.local_momentum:
        s.trainer_state += 1
    s.shared_on_node = cfg.run.share_node_memory and not s.gpu and not cfg.cross_device
    s.workers = cfg.data.loader_workers(device) if workers is None else workers
    s.eval_transient = EVAL_LIVE_MAPS * cfg.eval.batch_size * largest * s.b
    s.activation_factor = ACTIVATION_FACTOR
    return s


def _add_party(ranks: list, cfg, party, s: SimpleNamespace, base) -> float:
    """Append the party's trainer ranks' needs to `ranks`; returns what its ranks on a node hold once there."""
    classes = party_classes(cfg, party)
    public = cfg.data.public
    if s.rule.training.public_identities and public.kind == "synthetic":
        classes += public.identities
    size, batch = len(party.ranks), rank_batch(cfg, party.name)
    classes_here = math.ceil(classes / size) if s.m.classifier != "replicated" and size > 1 else classes
    b, n = s.b, s.n
    received = (s.D + s.k_down * n) * b                       # the global payload
    kept_state = s.trainer_state - (1 if s.rule.global_state and s.shared_on_node else 0)
    for i, rank in enumerate(party.ranks):
        tensors = {
            "model": (s.D + n) * b,
            "payloads": (s.k_up * n * b + ((s.D if s.gpu else 0) + s.columns) * b * (i == 0)
                         + (0 if s.shared_on_node else received)),
            "rule state": kept_state * n * b + s.rule.training.kept_states * s.D * b,
            "classifier": 3 * classes_here * s.m.embedding_size * b
                          # a class payload: the party's rows gathered on its leader (and their padded blocks)
                          + (2 * classes * s.m.embedding_size * b if i == 0 and s.rule.classes.gathered else 0),
            "activations": (batch * (s.activation_factor * s.values + 4 * classes_here) * b
                            + STEP_TRANSIENT_MB * MB),
        }
        need = RankNeed(rank, f"trainer:{party.name}", base("trainer"))
        (need.gpu if s.gpu else need.host).update(tensors)
        need.host["workers"] = s.workers * WORKER_MB * MB
        ranks.append(need)
    return (received + (s.trainer_state - kept_state) * n * b) if s.shared_on_node else 0.0


def place_shared(need: LayoutNeed, layout, nodes: list[str]) -> LayoutNeed:
    """Fill need.shared: each party's node-shared copy once per node its ranks run on."""
    need.shared = {}
    for party in layout.parties:
        if need.shared_bytes_per_party.get(party.name):
            for node in sorted({nodes[r] for r in party.ranks}):
                need.shared[(party.name, node)] = need.shared_bytes_per_party[party.name]
    return need
