"""A trainer rank's virtual clients under secure aggregation (fed.secure_aggregation; fedmpi/secagg): each
sampled client is a participant (id = client + 1). Before training, the rank runs the key stages for its clients
(their messages batched into one per stage); after each client trains, it masks [q_w | e(w (u_k − ref))] with
w = n_k / the largest client's n (public: the partition's) and adds it to the rank's partial sum, which is
therefore masked too; after the round the rank sends the partial sum with its members and answers the unmasking
for them. With `clients.dropout` = p each client misses each stage with probability p, drawn from (seed, round,
client): it then sends nothing from that stage on. The server's side is crossdevice/secure_exchange.py; a
round the server refuses (below the threshold) gets None at the next stage, and the rank stops there."""
from __future__ import annotations

import numpy as np
import torch

from fedmpi import comm
from fedmpi.layout import SERVER
from fedmpi.secagg import ProtocolError
from fedmpi.secagg.participant import Participant
from fedmpi.secagg.simulate import missed_stage
from fedmpi.core.secure_uploads import deltas, dp_noise_std, dp_share, encoding

TAG_KEYS, TAG_SETUP, TAG_SHARES, TAG_ROUTED, TAG_MASKED, TAG_ASK, TAG_UNMASK = range(7430, 7437)


def dropout_plan(cfg, r: int, clients: list[int]) -> dict[int, str | None]:
    """participant id -> the stage its client misses in round r (None: it stays), the same on every rank."""
    seed, rate = cfg.fed.secure_aggregation.seed, cfg.clients.dropout
    return {k + 1: missed_stage(rate, np.random.default_rng((seed, r, k))) if rate else None for k in clients}


class SecureClients:
    def __init__(self, cfg, control, sizes: np.ndarray, backbone: int, up_numel: int):
        self.cfg, self.control, self.backbone, self.length = cfg, control, backbone, up_numel + 1
        self.encoding = encoding(cfg)
        self.noise, self.clip = dp_noise_std(cfg), cfg.fed.dp.clip
        # DP counts every client once (its sensitivity is C / m); otherwise n_k weighs, as the plain reduction
        self.weights = np.ones(len(sizes)) if self.noise is not None else sizes / sizes.max()
        self.seed = cfg.fed.secure_aggregation.seed

    @staticmethod
    def build(cfg, control, sizes, backbone: int, up_numel: int) -> "SecureClients | None":
        enabled = cfg.fed.secure_aggregation.enabled
        return SecureClients(cfg, control, sizes, backbone, up_numel) if enabled else None

    def _send(self, value, tag: int, what: str) -> None:
        comm.send(value, SERVER, tag, what=f"round {self.r + 1}: {what}", timeout_s=self.control.timeout_s,
                  comm=self.control.mpi)

    def _receive(self, tag: int, what: str):
        return comm.receive(SERVER, tag, what=f"round {self.r + 1}: {what}", timeout_s=self.control.timeout_s,
                            comm=self.control.mpi)

    def prepare(self, r: int, clients: list[int], down: torch.Tensor) -> None:
        """R0 and R1 for this rank's clients of round r, before they train."""
        self.r, self.order, self.next, self.down = r, list(clients), 0, down
        self.plan = dropout_plan(self.cfg, r, clients)
        self.people = {u: Participant(u, self.encoding.bits) for u in self.plan if self.plan[u] != "advertise"}
        self.members: list[int] = []
        self.partial = np.zeros(self.length, dtype=self.encoding.dtype)
        self._send({u: p.advertise() for u, p in self.people.items()}, TAG_KEYS, "the clients' SecAgg keys")
        setups = self._receive(TAG_SETUP, "the SecAgg session")
        sent = {}
        for u, (sid, threshold, peers) in (setups or {}).items():
            if self.plan[u] != "share keys":
                try:
                    sent[u] = self.people[u].share_keys(sid, threshold, peers)
                except ProtocolError:       # fewer than t of its neighbours advertised: it leaves the round
                    pass
        self._send(None if setups is None else sent, TAG_SHARES, "the clients' sealed shares")
        self.routed = self._receive(TAG_ROUTED, "the sealed shares") if setups is not None else None

    def add(self, upload: torch.Tensor) -> None:
        """The next client's upload [θ_k | up payloads], as it is trained: masked into the partial sum."""
        k = self.order[self.next]
        self.next += 1
        u = k + 1
        if self.routed is None or u not in self.routed or self.plan[u] == "masked input":
            return
        rng = np.random.default_rng((self.seed, u, self.r))
        x = deltas(upload, self.down, self.backbone)
        if self.noise is not None:      # distributed DP: clip and add this client's share of the noise
            dp_share(x, self.clip, self.noise)
        words = self.encoding.encode(x, float(self.weights[k]), rng)
        np.add(self.partial, self.people[u].masked_input(self.routed[u], words, in_place=True), out=self.partial)
        self.members.append(u)

    def finish(self) -> None:
        """R2's partial sum and its members, then R4's shares of this rank's clients that answer."""
        bits = self.encoding.bits
        if bits < 8 * self.partial.itemsize:
            np.bitwise_and(self.partial, self.partial.dtype.type((1 << bits) - 1), out=self.partial)
        refused = self.routed is None
        self._send(None if refused else (self.members, self.partial), TAG_MASKED, "the clients' masked sum")
        if refused:
            return
        ask = self._receive(TAG_ASK, "the unmasking request")
        if ask is None:
            return
        survivors, dropped = ask
        answers = {u: self.people[u].unmask(survivors, dropped) for u in self.members
                   if u in survivors and self.plan[u] != "unmask"}
        self._send(answers, TAG_UNMASK, "the clients' unmasking shares")
