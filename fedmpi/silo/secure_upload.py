"""A party leader's upload under secure aggregation (fed.secure_aggregation; fedmpi/secagg): instead of θ_i it
sends [q_w | e(w (u_i − ref))] masked, over the four stages of the protocol with the server on the control channel
(mpi4py). u_i = [θ_i | up payloads], ref = [Θ | 0] (the global backbone it started the round from; the rule's up
payloads, SCAFFOLD's control-variate deltas, are deltas already), w = its party's initial weight over the largest
(fed.weighting: public, from the config), q_w = round(w T). The server's side is silo/secure_exchange.py."""
from __future__ import annotations

import numpy as np
import torch

from fedmpi import comm
from fedmpi.layout import SERVER, party_batches
from fedmpi.core.secure_uploads import deltas, dp_noise_std, dp_share, encoding
from fedmpi.secagg.participant import Participant

TAG_KEYS, TAG_SETUP, TAG_SHARES, TAG_ROUTED, TAG_MASKED, TAG_ASK, TAG_UNMASK = range(7420, 7427)


def party_weights(cfg, layout) -> np.ndarray:
    """Each party's weight over the largest, in [0, 1]: fed.weighting's w (silo/setting.initial_weights) scaled
    to its largest, public (the config's)."""
    if cfg.fed.weighting == "uniform":
        return np.ones(len(layout.parties))
    sizes = np.array(list(party_batches(cfg, layout).values()), dtype=np.float64)
    return sizes / sizes.max()


class SecureUpload:
    """The leader's side, one session per round (every key fresh)."""

    def __init__(self, cfg, party, weight: float, backbone: int, control):
        self.encoding, self.weight, self.backbone = encoding(cfg), float(weight), backbone
        self.name, self.warned = party.name, False
        self.noise, self.clip = dp_noise_std(cfg), cfg.fed.dp.clip
        self.uid, self.control, self.seed = party.index + 1, control, cfg.fed.secure_aggregation.seed

    @staticmethod
    def build(cfg, ctx, party, backbone: int) -> "SecureUpload | None":
        if not cfg.fed.secure_aggregation.enabled:
            return None
        return SecureUpload(cfg, party, party_weights(cfg, ctx.layout)[party.index], backbone, ctx.control)

    def _send(self, value, tag: int, what: str, r: int) -> None:
        comm.send(value, SERVER, tag, what=f"round {r + 1}: {what}", timeout_s=self.control.timeout_s,
                  comm=self.control.mpi)

    def _receive(self, tag: int, what: str, r: int):
        return comm.receive(SERVER, tag, what=f"round {r + 1}: {what}", timeout_s=self.control.timeout_s,
                            comm=self.control.mpi)

    def upload(self, r: int, up: torch.Tensor, down: torch.Tensor) -> None:
        rng = np.random.default_rng((self.seed, self.uid, r))
        x = deltas(up, down, self.backbone)
        if self.noise is not None:      # distributed DP: clip and add this party's share of the noise
            dp_share(x, self.clip, self.noise)
        words = self.encoding.encode(x, self.weight, rng)
        if self.encoding.clipped and not self.warned:   # once a run: the sum then differs from the plain one
            self.warned = True
            print(f"note: round {r + 1}: party {self.name} clipped {self.encoding.clipped} of {words.size - 1} "
                  f"entries of its weighted update at ±{self.encoding.clip:g} "
                  f"(fed.secure_aggregation.clipping_range)", flush=True)
        me = Participant(self.uid, self.encoding.bits)
        self._send(me.advertise(), TAG_KEYS, "the party's SecAgg keys", r)
        sid, threshold, peers = self._receive(TAG_SETUP, "the SecAgg session", r)
        self._send(me.share_keys(sid, threshold, peers), TAG_SHARES, "the party's sealed shares", r)
        routed = self._receive(TAG_ROUTED, "the other parties' sealed shares", r)
        self._send(me.masked_input(routed, words, in_place=True), TAG_MASKED, "the party's masked update", r)
        survivors, dropped = self._receive(TAG_ASK, "the unmasking request", r)
        self._send(me.unmask(survivors, dropped), TAG_UNMASK, "the party's unmasking shares", r)
