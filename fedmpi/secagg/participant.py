"""A participant's side of one SecAgg / SecAgg+ session (one round; every key fresh), as a state machine:

advertise() -> (c_pk, s_pk)                        R0: two X25519 key pairs (shares' encryption, masks)
share_keys(sid, threshold, keys) -> (sealed, commitment)   R1: Shamir shares of b_u and s_u^SK, one sealed box per peer
masked_input(received, x) -> y                     R2: y = x + PRG(k_u) + Σ_{v>u} PRG(k_uv) - Σ_{v<u} PRG(k_uv)
unmask(survivors, dropped) -> {v: share}           R4: b-shares of survivors, s^SK-shares of the dropped, never both
Sign convention: + for u < v (spec §8.1). A message that breaks the protocol raises ProtocolError naming its sender.
"""
from __future__ import annotations

import secrets

import numpy as np

from fedmpi.secagg import keys, masks, shares
from fedmpi.secagg.errors import ProtocolError

_ORDER = ("advertise", "share_keys", "masked_input", "unmask", "done")


class Participant:
    def __init__(self, uid: int, bits: int):
        if uid <= 0:
            raise ValueError(f"participant ids are positive (Shamir evaluates at x = id), got {uid}")
        self.uid, self.bits = uid, bits
        self._stage = "advertise"
        self._shares: dict[int, tuple[bytes, bytes]] = {}     # v -> (share of b_v, share of s_v^SK) held for v

    def _enter(self, stage: str) -> None:
        if self._stage != stage:
            raise ProtocolError(f"participant {self.uid}: asked for {stage} while at {self._stage}")
        self._stage = _ORDER[_ORDER.index(stage) + 1]

    def advertise(self) -> tuple[bytes, bytes]:
        self._enter("advertise")
        self._c, self._s = keys.new_private(), keys.new_private()
        return keys.public_bytes(self._c), keys.public_bytes(self._s)

    def share_keys(self, sid: bytes, threshold: int, peers: dict[int, tuple[bytes, bytes]]
                   ) -> tuple[dict[int, bytes], bytes]:
        """peers: the keys of its neighbours that advertised, and its own echoed. Returns a sealed box for each
        neighbour and the commitment to b_u the server checks a reconstruction against."""
        self._enter("share_keys")
        own = (keys.public_bytes(self._c), keys.public_bytes(self._s))
        if peers.get(self.uid) != own:
            raise ProtocolError(f"participant {self.uid}: the server did not echo its own keys")
        flat = [k for pair in peers.values() for k in pair]
        if len(set(flat)) != len(flat):
            raise ProtocolError(f"participant {self.uid}: two advertised keys are equal")
        if len(peers) < threshold:
            raise ProtocolError(f"participant {self.uid}: {len(peers)} holders for threshold {threshold}")
        self.sid, self.threshold, self._peers = sid, threshold, dict(peers)
        self._seed = secrets.token_bytes(32)
        holders = sorted(peers)
        b_shares = shares.split(self._seed, threshold, holders)
        sk_shares = shares.split(keys.private_bytes(self._s), threshold, holders)
        self._shares[self.uid] = (b_shares[self.uid], sk_shares[self.uid])
        sealed = {v: keys.seal(self._box_key(v), keys.ids(self.uid, v) + b_shares[v] + sk_shares[v],
                               sid + keys.ids(self.uid, v))
                  for v in holders if v != self.uid}
        return sealed, keys.commitment(sid, self.uid, self._seed)

    def _box_key(self, v: int) -> bytes:
        return keys.pair_key(self._c, self._peers[v][0], self.sid, "enc", self.uid, v)

    def masked_input(self, received: dict[int, bytes], x: np.ndarray, in_place: bool = False) -> np.ndarray:
        """received: the sealed boxes its neighbours sent it (v -> box). x: its encoded vector."""
        self._enter("masked_input")
        if len(received) + 1 < self.threshold:     # no t holders: its masks could not be removed (the server's check)
            raise ProtocolError(f"participant {self.uid}: {len(received) + 1} holders of its shares, fewer than the "
                                f"threshold {self.threshold}: it leaves the round")
        width = shares.SHARE_BYTES
        for v, box in received.items():
            if v not in self._peers or v == self.uid:
                raise ProtocolError(f"participant {v}: sent shares to {self.uid}, which is not its neighbour")
            plain = keys.open_sealed(self._box_key(v), box, self.sid + keys.ids(v, self.uid))
            if plain is None or len(plain) != 8 + 2 * width or plain[:8] != keys.ids(v, self.uid):
                raise ProtocolError(f"participant {v}: its shares for participant {self.uid} do not decrypt")
            self._shares[v] = (plain[8:8 + width], plain[8 + width:])
        self.mixed = sorted(received)                       # V_u: the neighbours it masks with
        y = x if in_place else x.copy()
        streams = [(keys.derive(self._seed, self.sid, "self", self.uid), 1)]
        streams += [(keys.pair_key(self._s, self._peers[v][1], self.sid, "pair", self.uid, v),
                     1 if self.uid < v else -1) for v in self.mixed]
        return masks.apply_all(y, streams, self.bits)

    def unmask(self, survivors: list[int], dropped: list[int]) -> dict[int, bytes]:
        """The b-share of each survivor and the s^SK-share of each dropped neighbour it holds (itself included).
        Refuses a request that would give the server both of one participant's secrets (spec §2, "never both")."""
        self._enter("unmask")
        alive, gone = set(survivors), set(dropped)
        if len(alive) != len(survivors) or len(gone) != len(dropped) or alive & gone:
            raise ProtocolError(f"participant {self.uid}: the survivors and the dropped overlap or repeat")
        if len(alive) < self.threshold or self.uid not in alive:
            raise ProtocolError(f"participant {self.uid}: {len(alive)} survivors (threshold {self.threshold}) "
                                f"or itself not among them: nothing is unmasked")
        if any(v not in alive | gone for v in self.mixed):
            raise ProtocolError(f"participant {self.uid}: a neighbour it masked with is neither a survivor "
                                f"nor dropped")
        self._stage = "done"
        return {v: b if v in alive else sk for v, (b, sk) in self._shares.items() if v in alive | gone}
