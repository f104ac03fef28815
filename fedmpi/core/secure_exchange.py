"""Secure aggregation's server side (fed.secure_aggregation; fedmpi/secagg), as a wrapper around any exchange of
the round loop (core/seams.py), as Flower's SecAgg+ workflow wraps its strategy and aggregation/dp.py wraps the
aggregator. The wrapped exchange says who the round's participants are and which rank carries each
(`participants`, `carriers(r)`: the silo parties' leaders, or the trainer ranks of the sampled clients) and moves
the global payload and the statistics; this wrapper takes the uploads instead, as a SecAgg / SecAgg+ session whose
participant side is core/secure_participant.py:

  post   R0 and R1: the participants' keys and sealed shares (before they train), one message per carrier
  wait   R2: each carrier's masked partial sum with its members; R4: the survivors' unmasking shares; then the
         decoded Σ w_k (u_k − ref) / Σ w_k, ref = [Θ | 0] (with fed.dp Σ (u_k − ref) / m, the fixed denominator,
         core/secure_uploads.py `decoded_mean`)

The server never holds one participant's upload (`rows` is None: FV, robust rules and the upload check cannot
run, config/secure_aggregation.py refuses them). Participants that miss a stage are removed with the survivors'
shares, and with a `log` its `secagg` table says who missed which stage; below the threshold t the round is
refused: nothing is unmasked, the global model takes no update (its server step sees a zero update), and a note
says at which stage. A participant that breaks the protocol ends the run in one line naming it."""
from __future__ import annotations

import re

import numpy as np
import torch

from fedmpi import comm
from fedmpi.comm.tags import (SECAGG_ASK, SECAGG_KEYS, SECAGG_MASKED, SECAGG_ROUTED, SECAGG_SETUP, SECAGG_SHARES,
                              SECAGG_UNMASK)
from fedmpi.core.secure_uploads import decoded_mean, dp_noise_std, encoding, mean_into
from fedmpi.secagg import ProtocolError
from fedmpi.secagg.server import Session
from fedmpi.secagg.simulate import STAGES


def secure_or_plain(cfg, plain, up_numel: int, backbone: int, log=None):
    """The round loop's exchange: `plain`, or under fed.secure_aggregation the session that takes its uploads."""
    if not cfg.fed.secure_aggregation.enabled:
        return plain
    return SecureExchange(cfg, plain, up_numel, backbone, log)


def log_table(count: int) -> dict:
    """The log's `secagg` table: per round, each participant's stage code (0: took part to the end; 1-4: the
    first of STAGES it missed) and the stage at which a refused round stopped (0: not refused)."""
    return {"round": ((), "i8"), "clients": ((count,), "i8"), "missed": ((count,), "i1"), "refused_at": ((), "i1")}


class SecureExchange:
    gives_uploads = False
    rows = None

    def __init__(self, cfg, inner, up_numel: int, backbone: int, log=None):
        self.inner, self.log, self.up_numel, self.backbone = inner, log, up_numel, backbone
        self.secure, self.encoding = cfg.fed.secure_aggregation, encoding(cfg)
        self._theta = torch.empty(backbone, dtype=torch.float64)
        self._mean: np.ndarray | None = None
        self.share_std = dp_noise_std(cfg)
        self.noise_std: float | None = None     # with fed.dp: the std per entry of the noise in the round's mean
        self._carriers: list[tuple[int, list[int]]] = []

    @property
    def upload_names(self) -> list[str]:
        return self.inner.upload_names

    @property
    def participation(self) -> float:
        return self.inner.participation

    def _each(self, values: dict | None, tag: int, what: str) -> None:
        """To every carrier its participants' values (None: the round is refused)."""
        for rank, ks in self._carriers:
            part = None if values is None else {k + 1: values[k + 1] for k in ks if k + 1 in values}
            comm.send(part, rank, tag, what=f"round {self._r + 1}: {what}", timeout_s=self.control.timeout_s,
                      comm=self.control.mpi)

    def _from_each(self, tag: int, what: str) -> list:
        return [comm.receive(rank, tag, what=f"round {self._r + 1}: {what}", timeout_s=self.control.timeout_s,
                             comm=self.control.mpi) for rank, _ in self._carriers]

    @property
    def control(self):
        return self.inner.control

    def post(self, r: int) -> None:
        """Round r's participants from the wrapped exchange, then the key stages."""
        self._r, self._mean, self._refused = r, None, 0
        self.noise_std = None if self.share_std is None else 0.0      # a refused round adds no noise
        self._carriers = self.inner.carriers(r)
        ids = [int(k) + 1 for k in self.inner.participants]
        self.session = Session(r, ids, self.secure.threshold_for(len(ids)), self.encoding.bits, self.up_numel + 1,
                               self.secure.degree(len(ids)))
        keys = {u: v for part in self._from_each(SECAGG_KEYS, "the SecAgg keys") for u, v in part.items()}
        setups = self._stage(1, lambda: self.session.receive_keys(keys))
        self._each(setups and {u: (setups[0], self.session.threshold, p) for u, p in setups[1].items()},
                   SECAGG_SETUP, "the SecAgg session")
        sent = self._from_each(SECAGG_SHARES, "the sealed shares")
        if setups is not None:
            shares = {u: v for part in sent for u, v in part.items()}
            self._each(self._stage(2, lambda: self.session.route_shares(shares)), SECAGG_ROUTED,
                       "the sealed shares routed")

    def _stage(self, code: int, step):
        """step(), or None where the round is refused there (below the threshold); any other break of the
        protocol ends the run in one line naming the participant."""
        try:
            return step()
        except ProtocolError as exc:
            if "fewer than the threshold" not in str(exc):
                text = re.sub(r"participant (\d+)", lambda m: self.inner.participant_name(int(m.group(1)) - 1),
                              str(exc))
                raise ProtocolError(f"round {self._r + 1}: secure aggregation: {text}") from None
            self._refused = code
            print(f"note: {exc}; the global model takes no update", flush=True)
            return None

    def is_complete(self) -> bool:
        """Every carrier's masked sum is in: its participants' training is over."""
        return all(self.control.mpi.Iprobe(source=rank, tag=SECAGG_MASKED) for rank, _ in self._carriers)

    def wait(self) -> None:
        sums = self._from_each(SECAGG_MASKED, "the masked sum")
        if not self._refused:
            for members, partial in (s for s in sums if s and s[0]):
                self._stage(3, lambda: self.session.receive_masked_sum(members, partial))
            ask = self._stage(3, self.session.close_masked)
            for rank, _ in self._carriers:
                comm.send(ask, rank, SECAGG_ASK, what=f"round {self._r + 1}: the unmasking request",
                          timeout_s=self.control.timeout_s, comm=self.control.mpi)
            if ask is not None:
                answers = {u: a for part in self._from_each(SECAGG_UNMASK, "the unmasking shares")
                           for u, a in part.items()}
                total = self._stage(4, lambda: self.session.unmask(answers))
                if total is not None:
                    self._mean, self.noise_std = decoded_mean(self.encoding, total, len(self.session.u3),
                                                              self.share_std)
        self._log_round()

    def _log_round(self) -> None:
        if self.log is None:
            return
        missed = self.session.dropped_at
        codes = np.array([STAGES.index(missed[k + 1]) + 1 if k + 1 in missed else 0
                          for k in self.inner.participants], np.int8)
        self.log.append("secagg", round=self._r, clients=self.inner.participants, missed=codes,
                        refused_at=self._refused)

    def weights(self, w):
        """The round's w as the side work gives it: the participants applied theirs before masking."""
        return w

    def weighted_mean(self, w, out: torch.Tensor) -> torch.Tensor:
        """ref + Σ w_k (u_k − ref) / Σ w_k (`w` is the fixed weighting the participants applied: their q_w / T,
        equal to it within 2^-bits), or ref in a refused round."""
        return mean_into(out, self._theta, self._mean)

    def send(self, down: torch.Tensor) -> None:
        self._theta.copy_(down[:self.backbone])      # the ref the participants' next updates are measured from
        self.inner.send(down)

    def round_stats(self, r: int):
        return self.inner.round_stats(r)

    def bytes_per_round(self) -> dict[str, int]:
        """Up: each carrier's masked vector (m + 1 words of the encoding; its protocol messages, as bench/secagg.py
        measures them, are < 0.1 % of it); down and intra as the wrapped exchange."""
        moved = self.inner.bytes_per_round()
        moved["up"] = len(self._carriers) * (self.up_numel + 1) * self.encoding.dtype.itemsize
        return moved

    def state_dict(self) -> dict:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.inner.load_state_dict(state)
