"""Validators: parties that own private validation sets, receive backbones, and return scores only.

Wire protocol between the server (rank 0) and a dedicated validator rank, in the order it happens:
  server -> validator   control word over mpi4py (tag TAG_CONTROL): "score" | "evaluate" | "stop"
  server -> validator   for "score" and "evaluate": the backbone, one flat buffer over torch.distributed
                        (point-to-point on the server+validators group)
  validator -> server   the reply over mpi4py (tag TAG_REPLY):
                          "score":    {set: FV score}                       (mean accuracy on the FV folds)
                          "evaluate": {set: {metric: value}}                (held-out folds, Evaluator keys)
A validator never receives anything else, and nothing but these numbers leaves it. Requests are answered in
the order they arrive, so the server may post several backbones before collecting their replies.

With FEDMPI_VALIDATOR_TRACE=<folder> set, a validator appends one JSON line per message that crosses its
boundary to <folder>/validator-<rank>.jsonl (what it was, never the images), for tests to check the above; a
control word's line also says how long the validator waited for it and the CPU time that waiting took
(bench/fv.py reports the idle validators' CPU share from these).

Placement: `fv.placement=dedicated` spreads the sets round-robin over the dedicated validator ranks;
otherwise (`server`, or FV off) the server hosts all of them in-process through the same `Validator` class,
one set at a time so that it can look after the round's exchange in between. The server's side of the
protocol (its client for the validators) is fv/validator_client.py.

An idle validator waits for the server's next control word with `comm.receive` (MPI Iprobe, then a short
sleep), so it costs next to no CPU while training runs, unlike a blocking mpi4py receive, which spins.
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import numpy as np
import torch

from fedmpi import comm
from fedmpi.comm import p2p
from fedmpi.core.context import Context
from fedmpi.fv import assign_sets, needs_validation_sets  # noqa: F401 - importable from here too
from fedmpi.fv.pair_subset import fv_fold_pairs, fv_pair_subset, subset_fv_accuracy
from fedmpi.core.state import BackboneState
from fedmpi.comm.tags import FV_CONTROL as TAG_CONTROL, FV_REPLY as TAG_REPLY
from fedmpi.layout import SERVER

SCORE, EVALUATE, STOP = "score", "evaluate", "stop"
CONTROL_WORDS = (SCORE, EVALUATE, STOP)
TRACE_ENV = "FEDMPI_VALIDATOR_TRACE"


def prepare_validation_data(cfg) -> dict[str, Path]:
    """{set: .bin path}, generating the synthetic sets when missing (rank 0 calls this before the others)."""
    from fedmpi.data import prepare_validation_sets

    return prepare_validation_sets(cfg.data)


class Validator:
    """Some validation sets and a backbone to load candidates into; scores and evaluates set by set. Each .bin
    is read and checked at start (a bad file ends the launch before training), its images are decoded when the
    set is first needed (a run may go a while before its first FV iteration or evaluation), then kept."""

    def __init__(self, cfg, names: list[str], backbone: torch.nn.Module, device):
        from fedmpi.data.verification_bin import read_pairs

        self.cfg, self.device = cfg, device
        paths = prepare_validation_data(cfg)
        self.names = list(names)
        self._encoded = {name: (paths[name], *read_pairs(paths[name])) for name in self.names}
        self._evaluators: dict = {}
        self._fv_pairs: dict[str, np.ndarray] = {}
        self._fv_subsets: set[str] = set()   # the sets scored on a subset of their FV pairs (fv.pairs_per_set)
        self.backbone = backbone
        self.state = BackboneState(backbone)

    def evaluator(self, name: str):
        """The Evaluator of one set (decoded on first use)."""
        if name not in self._evaluators:
            from fedmpi.data.verification_bin import decode_pairs
            from fedmpi.metrics.evaluator import Evaluator

            cfg = self.cfg
            path, encoded, issame = self._encoded.pop(name)
            images = decode_pairs(path, encoded, cfg.data.image_size)
            evaluator = Evaluator({name: (images, issame)}, fv_folds=cfg.fv.folds, batch_size=cfg.eval.batch_size,
                                  device=self.device)
            self._fv_pairs[name] = self._fv_pair_indices(evaluator, name)
            if len(self._fv_pairs[name]) < len(fv_fold_pairs(len(issame), evaluator.fv_folds, evaluator.n_folds)):
                self._fv_subsets.add(name)
            self._evaluators[name] = evaluator
        return self._evaluators[name]

    def _fv_pair_indices(self, evaluator, name: str) -> np.ndarray:
        """The pairs FV scores a candidate on: every pair of the FV folds, or the fixed subset of
        fv.pairs_per_set of them (fv/pair_subset.py)."""
        (_, issame), = evaluator.sets.values()
        return fv_pair_subset(issame, evaluator.fv_folds, evaluator.n_folds, self.cfg.fv.pairs_per_set,
                              self.cfg.run.seed, name)

    def load(self, flat: torch.Tensor) -> None:
        if flat.numel() != self.state.numel:
            raise ValueError(f"validator: a backbone of {flat.numel()} values, expected {self.state.numel}")
        self.state.write(flat)

    def score_set(self, name: str) -> float:
        """FV score of the loaded backbone on one set. Only the FV folds' pairs are embedded (or the subset of
        them, fv.pairs_per_set): the held-out half is not needed, and its placeholder scores are never read by
        the FV-fold accuracy."""
        from fedmpi.metrics.embed import embed_images, pair_scores

        evaluator = self.evaluator(name)
        (images, issame), = evaluator.sets.values()
        pairs = self._fv_pairs[name]
        image_index = torch.from_numpy(np.stack([2 * pairs, 2 * pairs + 1], 1).reshape(-1))
        embeddings = embed_images(self.backbone, images[image_index], evaluator.batch_size, evaluator.device)
        scored = pair_scores(embeddings)
        if not np.isfinite(scored).all():   # embeddings not finite: FV ranks the candidate last (fv/search.py)
            return math.nan
        if name in self._fv_subsets:   # a subset of the FV folds: the same rule on its 5 folds
            return float(subset_fv_accuracy(scored, issame[pairs], evaluator.n_folds // 2, evaluator.thresholds))
        scores = np.zeros(len(issame))
        scores[pairs] = scored
        return float(evaluator.fv_scores({name: scores})[name])

    def evaluate_set(self, name: str) -> dict[str, float]:
        """Held-out metrics of the loaded backbone on one set (each held-out fold's threshold from the other 9)."""
        return {k: float(v) for k, v in self.evaluator(name).evaluate(self.backbone)[name].items()}

    def answer(self, word: str, flat: torch.Tensor) -> dict:
        self.load(flat)
        if word == SCORE:
            return {name: self.score_set(name) for name in self.names}
        return {name: self.evaluate_set(name) for name in self.names}


class MessageTrace:
    """Debug record of what crosses a validator's boundary (enabled by FEDMPI_VALIDATOR_TRACE)."""

    def __init__(self, rank: int):
        folder = os.environ.get(TRACE_ENV)
        self.path = Path(folder) / f"validator-{rank}.jsonl" if folder else None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, **record) -> None:
        if self.path:
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")


def serve(validator: Validator, rank: int, group) -> None:
    """A dedicated validator's loop: answer requests from the server until it says stop (`group`: server +
    validators, over which the backbones come)."""
    mpi = comm.mpi_comm()
    trace = MessageTrace(rank)
    trace(direction="start", sets=validator.names)
    like = validator.state.tensors[0]
    buffer = torch.empty(validator.state.numel, dtype=like.dtype, device=like.device)
    while True:
        # no deadline: a validator may have nothing to do for a whole run; comm.receive polls (Iprobe + nap)
        wall, cpu = time.perf_counter(), time.process_time()
        word = comm.receive(SERVER, TAG_CONTROL, what="control word", timeout_s=None, comm=mpi)
        # what waiting for this word cost: wall seconds and CPU seconds (whole process)
        trace(direction="in", channel="mpi", kind="control", word=word if isinstance(word, str) else repr(word),
              wait_s=time.perf_counter() - wall, wait_cpu_s=time.process_time() - cpu)
        if word == STOP:
            return
        if word not in (SCORE, EVALUATE):
            raise RuntimeError(f"validator: unknown control word {word!r} from the server "
                               f"(expected one of {', '.join(CONTROL_WORDS)})")
        p2p.recv(buffer, src=SERVER, group=group)
        trace(direction="in", channel="torch.distributed", kind="backbone", numel=buffer.numel(),
              dtype=str(buffer.dtype))
        reply = validator.answer(word, buffer)
        trace(direction="out", channel="mpi", kind=word, reply=reply)
        mpi.send(reply, dest=SERVER, tag=TAG_REPLY)


def run_validator(cfg, ctx: Context, parts) -> int:
    """A dedicated validator rank: its share of the validation sets, scored on the run's model."""
    index = ctx.layout.validators.index(ctx.rank)
    names = assign_sets(list(cfg.data.val_sets), len(ctx.layout.validators))[index]
    serve(Validator(cfg, names, parts.model, parts.device), ctx.rank, ctx.groups.validators)
    comm.barrier(what="closing barrier (every rank)", timeout_s=cfg.run.collective_timeout_s)
    return 0
