"""The server's side of one SecAgg / SecAgg+ session: it routes keys and sealed shares, sums the masked vectors
and removes the masks with the survivors' shares. It never learns one participant's input: it asks for b-shares
of the survivors U3 and s^SK-shares of the dropped D = U2 \\ U3 only (spec §2). Below the threshold t at any stage
the round is refused, never unmasked partially; a participant that breaks the protocol is named in one line."""
from __future__ import annotations

import random
import secrets

import numpy as np

from fedmpi.secagg import graph, keys, masks, shares
from fedmpi.secagg.cores import over_pieces
from fedmpi.secagg.errors import ProtocolError


class Session:
    """participants: the sampled ids U0; length: entries of every masked vector; degree: SecAgg+'s k (None:
    everyone masks with everyone)."""

    def __init__(self, round_index: int, participants: list[int], threshold: int, bits: int, length: int,
                 degree: int | None = None, rng: random.Random | None = None):
        ids = sorted(participants)
        if threshold < 2 or threshold > len(ids):
            raise ValueError(f"threshold {threshold} must lie in [2, {len(ids)} participants]")
        self.round, self.threshold, self.bits, self.length = round_index, threshold, bits, length
        self.neighbours = (graph.full(ids) if degree is None
                           else graph.harary(ids, degree, rng or random.Random(secrets.randbits(64))))
        fewest = min(len(n) for n in self.neighbours.values()) + 1
        if threshold > fewest:
            raise ValueError(f"threshold {threshold} exceeds the {fewest} share holders of a participant "
                             f"(its neighbours and itself): raise the degree or lower the threshold")
        self.dropped_at: dict[int, str] = {u: "advertise" for u in ids}   # who missed which stage; trimmed below
        self.sum: np.ndarray | None = None

    def _enough(self, present, stage: str) -> None:
        if len(present) < self.threshold:
            raise ProtocolError(f"round {self.round + 1}: {len(present)} participants reached {stage}, fewer than "
                                f"the threshold {self.threshold}: the round is not unmasked")

    def receive_keys(self, advertised: dict[int, tuple[bytes, bytes]]) -> tuple[bytes, dict]:
        """R0 -> R1: the session id and, for each responder u, the keys of N(u) ∩ U1 and its own."""
        for u, pair in advertised.items():
            if u not in self.neighbours or len(pair) != 2 or any(len(k) != 32 for k in pair):
                raise ProtocolError(f"participant {u}: not sampled this round, or its public keys are not 2 x 32 bytes")
        for u in advertised:
            self.dropped_at.pop(u)
        self._enough(advertised, "advertise")
        self.keys = dict(advertised)
        self.u1 = set(advertised)
        self.sid = keys.session_id(self.round, self.keys)
        return self.sid, {u: {v: self.keys[v] for v in (self.neighbours[u] & self.u1) | {u}} for u in self.u1}

    def route_shares(self, sent: dict[int, tuple[dict[int, bytes], bytes]]) -> dict[int, dict[int, bytes]]:
        """R1 -> R2: each responder's sealed boxes to their addressees that shared too (v -> {u: box})."""
        for u, (boxes, _) in sent.items():
            if u not in self.u1 or any(v not in self.neighbours[u] or v not in self.u1 for v in boxes):
                raise ProtocolError(f"participant {u}: shares from or to a participant outside its advertised "
                                    f"neighbours")
        self.u2 = set(sent)
        self._enough(self.u2, "share keys")
        mixed = {v: {u for u in self.u2 if v in sent[u][0]} for v in self.u2}     # V_v, who holds v's shares
        # v's shares held by fewer than t (V_v and v itself) can rebuild neither its self-mask seed nor its mask
        # key: it leaves the round here, as a dropout of this stage, and no one masks with it (Bell et al. 2020,
        # as Flower's SecAgg+ client aborts); its leaving thins its neighbours' V, so until none is left short
        while short := {v for v in self.u2 if len(mixed[v] & self.u2) + 1 < self.threshold}:
            self.u2 -= short
        for u in self.u1 - self.u2:
            self.dropped_at[u] = "share keys"
        self._enough(self.u2, "share keys with t holders of their shares")
        self.commitments = {u: sent[u][1] for u in self.u2}
        self.mixed = {v: sorted(mixed[v] & self.u2) for v in self.u2}
        self.u3: set[int] = set()
        self.sum = np.zeros(self.length, dtype=np.uint32 if self.bits <= 32 else np.uint64)
        self._open = True
        return {v: {u: sent[u][0][v] for u in self.mixed[v]} for v in self.u2}

    def receive_masked(self, u: int, y: np.ndarray) -> None:
        """R2: one masked vector, added into the running sum. Late, duplicate, wrong-length or out-of-range
        vectors are refused, naming the participant."""
        self.receive_masked_sum([u], y)

    def receive_masked_sum(self, members: list[int], y: np.ndarray) -> None:
        """R2: the sum mod 2^bits of several participants' masked vectors (a trainer rank's clients: what it adds
        up is masked already); refused as one participant's vector is, naming the first member."""
        u = members[0] if members else None
        if not getattr(self, "_open", False):
            raise ProtocolError(f"participant {u}: masked input arrived after the masked-input stage closed")
        if any(v not in self.u2 or v in self.u3 for v in members) or len(set(members)) != len(members):
            raise ProtocolError(f"participant {u}: masked input without shared keys, or sent twice")
        if y.shape != (self.length,) or y.dtype != self.sum.dtype:
            raise ProtocolError(f"participant {u}: masked vector of {y.size} {y.dtype} entries, expected "
                                f"{self.length} {self.sum.dtype}")
        top = y.dtype.type(self.bits)
        if self.bits < 8 * y.itemsize and any(over_pieces(y.size, lambda a, b: np.any(y[a:b] >> top))):
            raise ProtocolError(f"participant {u}: masked vector has entries >= 2^{self.bits}, the modulus")
        # wraps mod 2^32 / 2^64, which 2^bits divides
        over_pieces(y.size, lambda a, b: np.add(self.sum[a:b], y[a:b], out=self.sum[a:b]))
        self.u3.update(members)

    def close_masked(self) -> tuple[list[int], list[int]]:
        """R2 -> R4: (U3, D), what every survivor is asked to unmask."""
        self._open = False
        for u in self.u2 - self.u3:
            self.dropped_at[u] = "masked input"
        self._enough(self.u3, "masked input")
        return sorted(self.u3), sorted(self.u2 - self.u3)

    def unmask(self, answers: dict[int, dict[int, bytes]]) -> np.ndarray:
        """R4: Σ_{u ∈ U3} x_u mod 2^bits from the survivors' shares."""
        stray = [u for u in answers if u not in self.u3]
        if stray:
            raise ProtocolError(f"participant {stray[0]}: unmasking shares from a participant not among the survivors")
        for u in self.u3 - set(answers):
            self.dropped_at[u] = "unmask"
        self._enough(answers, "unmask")
        seeds = {v: self._reconstruct(v, answers, "self-mask seed",
                                      lambda s, v=v: keys.commitment(self.sid, v, s) == self.commitments[v])
                 for v in sorted(self.u3)}
        def is_key(v):
            return lambda s: keys.public_bytes(keys.private_from(s)) == self.keys[v][1]
        private = {v: keys.private_from(self._reconstruct(v, answers, "mask key", is_key(v)))
                   for v in sorted(self.u2 - self.u3)}
        # every secret reconstructed and checked: only now is any mask removed
        streams = [(keys.derive(seed, self.sid, "self", v), -1) for v, seed in seeds.items()]
        streams += [(keys.pair_key(key_v, self.keys[w][1], self.sid, "pair", v, w), -1 if w < v else 1)
                    for v, key_v in private.items()
                    for w in self.mixed[v] if w in self.u3]             # w masked with v: remove PRG(k_wv)
        total = masks.apply_all(self.sum, streams, self.bits)          # reduced mod 2^bits, streams or none
        self.sum = None
        return total

    def _reconstruct(self, v: int, answers: dict[int, dict[int, bytes]], what: str, valid) -> bytes:
        held = {h: a[v] for h, a in answers.items() if v in a and (h == v or h in self.mixed[v])}
        if len(held) < self.threshold:
            raise ProtocolError(f"round {self.round + 1}: {len(held)} shares of participant {v}'s {what}, fewer "
                                f"than the threshold {self.threshold}: the round is not unmasked")
        first = [dict(sorted(held.items())[:self.threshold])]
        leave_one_out = [dict(sorted((h, s) for h, s in held.items() if h != out)[:self.threshold]) for out in held]
        for trusted in first + [t for t in leave_one_out if len(t) == self.threshold]:
            secret = shares.combine(trusted, self.threshold)
            if secret is not None and valid(secret):
                bad = shares.off_polynomial(held, trusted)     # every share must lie on the one polynomial
                if bad:
                    raise ProtocolError(f"participant {', '.join(map(str, bad))}: its share of participant {v}'s "
                                        f"{what} does not reconstruct: the round is not unmasked")
                return secret
        raise ProtocolError(f"participant {v}: the shares of its {what} (held by {sorted(held)}) do not "
                            f"reconstruct: the round is not unmasked")
