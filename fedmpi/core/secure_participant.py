"""Secure aggregation's participant side (fed.secure_aggregation; fedmpi/secagg), as a wrapper around a carrier
rank's plain uploads (core/seams.py, Uploads), as Flower's SecAgg+ client mod wraps a client. A carrier sends its
participants' messages, batched into one per stage: a silo party's leader carries its party (one participant,
id = party index + 1), a cross-device trainer rank the clients it trains in the round (id = client + 1).

  begin  R0 and R1 (advertise keys, share keys) for the round's participants, on a thread of their own
         while they train (the stages do not depend on the update)
  each   as each is trained: its upload u = [θ | up payloads] becomes x = u − ref, ref = [Θ | 0] (the global
         backbone the round started from; the rule's up payloads, SCAFFOLD's control-variate deltas, are deltas
         already), with fed.dp clipped and given its share of the noise (distributed DP), encoded
         [q_w | e(w x)] and masked into the carrier's partial sum, which is therefore masked too
  end    R2: the partial sum with its members; R4: the unmasking shares of the members the server asks

w = the participant's size over the largest (public: the config's batch per step, the partition's n_k), 1 for
every participant with fed.dp (each counts once: its sensitivity is C / m) or without sizes (uniform weighting).
With `dropout` = p each participant misses each stage with probability p, drawn from (seed, round, participant):
it sends nothing from that stage on. A round the server refuses (below the threshold) gets None at the next
stage, and the carrier stops there. The server's side is core/secure_exchange.py."""
from __future__ import annotations

import threading

import numpy as np
import torch

from fedmpi import comm
from fedmpi.comm.tags import (SECAGG_ASK, SECAGG_KEYS, SECAGG_MASKED, SECAGG_ROUTED, SECAGG_SETUP, SECAGG_SHARES,
                              SECAGG_UNMASK)
from fedmpi.core.secure_uploads import deltas, dp_noise_std, dp_share, encoding
from fedmpi.layout import SERVER
from fedmpi.secagg import ProtocolError
from fedmpi.secagg.participant import Participant
from fedmpi.secagg.simulate import missed_stage


def secure_or_plain(cfg, plain, control, names, sizes: np.ndarray | None, backbone: int, up_numel: int,
                    dropout: float = 0.0):
    """The carrier's uploads: `plain`, or under fed.secure_aggregation the masked ones that replace it. `names`:
    participant index -> what a line calls it; `sizes`: each participant's size (None: all weigh alike)."""
    if not cfg.fed.secure_aggregation.enabled:
        return plain
    return SecureUploads(cfg, control, names, sizes, backbone, up_numel, dropout)


def dropout_plan(seed: int, rate: float, r: int, participants: list[int]) -> dict[int, str | None]:
    """participant id -> the stage it misses in round r (None: it stays), the same on every rank."""
    return {k + 1: missed_stage(rate, np.random.default_rng((seed, r, k))) if rate else None for k in participants}


class SecureUploads:
    def __init__(self, cfg, control, names, sizes: np.ndarray | None, backbone: int, up_numel: int, dropout: float):
        self.names, self.control, self.backbone, self.rate = names, control, backbone, dropout
        self.length = up_numel + 1
        self.encoding = encoding(cfg)
        self.noise, self.clip = dp_noise_std(cfg), cfg.fed.dp.clip
        self.weights = None if self.noise is not None or sizes is None else sizes / sizes.max()
        self.seed = cfg.fed.secure_aggregation.seed
        self.warned = False

    def _send(self, value, tag: int, what: str) -> None:
        comm.send(value, SERVER, tag, what=f"round {self.r + 1}: {what}", timeout_s=self.control.timeout_s,
                  comm=self.control.mpi)

    def _receive(self, tag: int, what: str):
        return comm.receive(SERVER, tag, what=f"round {self.r + 1}: {what}", timeout_s=self.control.timeout_s,
                            comm=self.control.mpi)

    def begin(self, r: int, participants: list[int], down: torch.Tensor) -> None:
        """R0 and R1 for this carrier's participants of round r (indices: party or client). They do not depend on
        the update: they run on a thread of their own while the participants train (where MPI allows a second
        thread: `threads_allowed`; their tags are theirs alone), and the first `each` or `end` waits for them."""
        self.r, self.order, self.next, self.down = r, list(participants), 0, down
        self.plan = dropout_plan(self.seed, self.rate, r, participants)
        self.people = {u: Participant(u, self.encoding.bits) for u in self.plan if self.plan[u] != "advertise"}
        self.members: list[int] = []
        self.partial = np.zeros(self.length, dtype=self.encoding.dtype)
        self.keys = Beside(self._key_stages)

    def _key_stages(self) -> None:
        self._send({u: p.advertise() for u, p in self.people.items()}, SECAGG_KEYS, "the SecAgg keys")
        setups = self._receive(SECAGG_SETUP, "the SecAgg session")
        sent = {}
        for u, (sid, threshold, peers) in (setups or {}).items():
            if self.plan[u] != "share keys":
                try:
                    sent[u] = self.people[u].share_keys(sid, threshold, peers)
                except ProtocolError:       # fewer than t of its neighbours advertised: it leaves the round
                    pass
        self._send(None if setups is None else sent, SECAGG_SHARES, "the sealed shares")
        self.routed = self._receive(SECAGG_ROUTED, "the sealed shares routed") if setups is not None else None

    def each(self, upload: torch.Tensor) -> None:
        """The next participant's upload [θ | up payloads], as it is trained: masked into the partial sum."""
        self.keys.join()
        k = self.order[self.next]
        self.next += 1
        u = k + 1
        if self.routed is None or u not in self.routed or self.plan[u] == "masked input":
            return
        x = deltas(upload, self.down, self.backbone)
        if self.noise is not None:      # distributed DP: clip and add this participant's share of the noise
            dp_share(x, self.clip, self.noise)
        words = self.encoding.encode(x, 1.0 if self.weights is None else float(self.weights[k]),
                                     np.random.default_rng((self.seed, u, self.r)))
        if self.encoding.clipped and not self.warned:   # once a run: the sum then differs from the plain one
            self.warned = True
            print(f"note: round {self.r + 1}: {self.names(k)} clipped {self.encoding.clipped} of {words.size - 1} "
                  f"entries of its weighted update at ±{self.encoding.clip:g} "
                  f"(fed.secure_aggregation.clipping_range)", flush=True)
        np.add(self.partial, self.people[u].masked_input(self.routed[u], words, in_place=True), out=self.partial)
        self.members.append(u)

    def end(self, total=None) -> None:
        """R2's partial sum and its members, then R4's shares of this carrier's participants that answer."""
        self.keys.join()
        bits = self.encoding.bits
        if bits < 8 * self.partial.itemsize:
            np.bitwise_and(self.partial, self.partial.dtype.type((1 << bits) - 1), out=self.partial)
        refused = self.routed is None
        self._send(None if refused else (self.members, self.partial), SECAGG_MASKED, "the masked sum")
        if refused:
            return
        ask = self._receive(SECAGG_ASK, "the unmasking request")
        if ask is None:
            return
        survivors, dropped = ask
        answers = {u: self.people[u].unmask(survivors, dropped) for u in self.members
                   if u in survivors and self.plan[u] != "unmask"}
        self._send(answers, SECAGG_UNMASK, "the unmasking shares")


def threads_allowed() -> bool:
    """Whether the MPI library lets a second thread call it (MPI_THREAD_MULTIPLE, as Open MPI's wheel does); a
    site's MPI that gives less runs the key stages in line, before the training."""
    from mpi4py import MPI

    return MPI.Query_thread() >= MPI.THREAD_MULTIPLE


class Beside:
    """work() on a daemon thread (a run that fails elsewhere is not held at exit by its waits), or in line where MPI
    allows no second thread; `join` waits for it and raises what it raised, once."""

    def __init__(self, work):
        self.error: BaseException | None = None
        self.thread = None
        if not threads_allowed():
            self._run(work)
            return
        self.thread = threading.Thread(target=self._run, args=(work,), name="secagg-keys", daemon=True)
        self.thread.start()

    def _run(self, work) -> None:
        try:
            work()
        except BaseException as exc:     # noqa: BLE001 - handed to the thread that joins
            self.error = exc

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()
        error, self.error = self.error, None
        if error is not None:
            raise error
