"""The server's exchange under secure aggregation (fed.secure_aggregation; fedmpi/secagg): it runs a SecAgg /
SecAgg+ session with the party leaders each round (silo/secure_upload.py is their side) and sees only the sum
Σ_i [q_i | e(w_i (u_i − ref))], from which it decodes Σ w_i (u_i − ref) / Σ w_i: the weighted mean of the uploads
less ref = [Θ | 0], Θ the global backbone it sent. No row of any party exists here (`rows` is None: FV, robust
rules and the upload check cannot run, config/secure_aggregation.py refuses them). A participant that breaks the
protocol, or a round below the threshold, ends the run in one line naming the party; nothing is unmasked then."""
from __future__ import annotations

import re

import numpy as np
import torch

from fedmpi import comm
from fedmpi.secagg import ProtocolError
from fedmpi.secagg.server import Session
from fedmpi.silo.exchange import SiloExchange, broadcast_global
from fedmpi.core.secure_uploads import decoded_mean, dp_noise_std, encoding, mean_into
from fedmpi.silo.secure_upload import TAG_ASK, TAG_KEYS, TAG_MASKED, TAG_ROUTED, TAG_SETUP, TAG_SHARES, TAG_UNMASK


class SecureSiloExchange(SiloExchange):
    """The SiloExchange's statistics and bytes, with the uploads replaced by a secure-aggregation session."""

    gives_uploads = False
    rows = None

    def __init__(self, cfg, parties, leaders, control, up_numel: int, down_numel: int, backbone: int, dtype,
                 intra_receivers: int = 0):
        # deliberately not SiloExchange.__init__: it would hold a [P, D_up] buffer of rows this server never has
        self.leaders, self.control, self.dtype = leaders, control, dtype
        self._columns = ()   # the config refuses a training with upload columns (its rule is not a mean)
        self._leaders = [p.leader for p in parties]
        self.upload_names = [p.name for p in parties]
        self._sizes, self._intra_receivers = (up_numel, down_numel), intra_receivers
        self.secure, self.encoding, self.backbone = cfg.fed.secure_aggregation, encoding(cfg), backbone
        self._theta = torch.empty(backbone, dtype=torch.float64)
        self._mean: np.ndarray | None = None
        self._round = 0
        self.share_std = dp_noise_std(cfg)
        self.noise_std: float | None = None     # with fed.dp: the std per entry of the noise in the round's mean

    def post(self, r: int) -> None:
        self._round, self._mean = r, None

    def is_complete(self) -> bool:
        """Every leader's keys are in: the local steps are over and the session can run."""
        return all(self.control.mpi.Iprobe(source=leader, tag=TAG_KEYS) for leader in self._leaders)

    def _receive_all(self, tag: int, what: str) -> dict:
        return {i + 1: comm.receive(leader, tag, what=f"round {self._round + 1}: {what} of party "
                                                       f"{self.upload_names[i]}",
                                    timeout_s=self.control.timeout_s, comm=self.control.mpi)
                for i, leader in enumerate(self._leaders)}

    def _send_each(self, values: dict, tag: int, what: str) -> None:
        for i, leader in enumerate(self._leaders):
            comm.send(values[i + 1], leader, tag, what=f"round {self._round + 1}: {what}",
                      timeout_s=self.control.timeout_s, comm=self.control.mpi)

    def wait(self) -> None:
        """The round's session: keys, shares, masked updates, unmasking; then the decoded weighted mean."""
        n, r = len(self._leaders), self._round
        try:
            session = Session(r, list(range(1, n + 1)), self.secure.threshold_for(n), self.encoding.bits,
                              self._sizes[0] + 1, self.secure.degree(n))
            sid, peers = session.receive_keys(self._receive_all(TAG_KEYS, "the SecAgg keys"))
            self._send_each({u: (sid, session.threshold, peers[u]) for u in peers}, TAG_SETUP, "the SecAgg session")
            routed = session.route_shares(self._receive_all(TAG_SHARES, "the sealed shares"))
            self._send_each(routed, TAG_ROUTED, "the sealed shares")
            for u, y in self._receive_all(TAG_MASKED, "the masked update").items():
                session.receive_masked(u, y)
            ask = session.close_masked()
            self._send_each({u: ask for u in range(1, n + 1)}, TAG_ASK, "the unmasking request")
            total = session.unmask(self._receive_all(TAG_UNMASK, "the unmasking shares"))
        except ProtocolError as exc:
            names = self.upload_names
            text = re.sub(r"participant (\d+)", lambda m: f"party {names[int(m.group(1)) - 1]}", str(exc))
            raise ProtocolError(f"round {r + 1}: secure aggregation: {text}") from None
        self._mean, self.noise_std = decoded_mean(self.encoding, total, n, self.share_std)

    def weighted_mean(self, w, out: torch.Tensor) -> torch.Tensor:
        """ref + Σ w_i (u_i − ref) / Σ w_i; `w` is the fixed weighting the parties applied before masking (their
        q_w / T, equal to it within 2^-bits)."""
        return mean_into(out, self._theta, self._mean)

    def send(self, down: torch.Tensor) -> None:
        self._theta.copy_(down[:self.backbone])      # the ref the leaders' next updates are measured from
        broadcast_global(down, self.leaders)

    def bytes_per_round(self) -> dict[str, int]:
        """Up: each party's masked vector (m + 1 words of the encoding) and its protocol messages, as measured by
        bench/secagg.py (< 0.1 % of the vector); down and intra as the plain exchange."""
        moved = super().bytes_per_round()
        P = len(self._leaders)
        moved["up"] = P * (self._sizes[0] + 1) * self.encoding.dtype.itemsize
        return moved


def leaves_party(cfg, plain: str) -> str:
    """The start-up line's (and the log's) words for what crosses from a party to the server."""
    s = cfg.fed.secure_aggregation
    if not s.enabled:
        return plain
    return (f"{plain}, masked ({s.mode}: the server sees only the parties' weighted sum, their weights summed "
            f"beside it)")


def upload_check_note(cfg) -> str | None:
    """Why the upload check is not run, and what bounds a party's upload instead, or None."""
    s = cfg.fed.secure_aggregation
    if not s.enabled or cfg.fed.upload_check.action == "off":
        return None
    return (f"note: fed.upload_check needs each upload, which secure aggregation hides: not run; each party clips "
            f"every entry of its weighted update to ±{s.clipping_range:g} (fed.secure_aggregation.clipping_range) "
            f"before encoding, which bounds what one party can add")
