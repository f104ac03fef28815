"""The server's exchange of a cross-device round under secure aggregation (fed.secure_aggregation; fedmpi/secagg):
every sampled client is a participant, its trainer rank's messages carry all of its clients' (one per stage and
rank: crossdevice/secure_clients.py). `post` samples the round and runs the key stages (the clients' keys and
sealed shares, before they train); `wait` takes each rank's masked partial sum with its members, asks the
survivors to unmask and decodes Σ w_k (u_k − ref) / Σ w_k, w_k = n_k / the largest n (with fed.dp: Σ (u_k − ref)
/ m, the fixed denominator, core/secure_uploads.py `decoded_mean`). Clients that miss a stage
(clients.dropout) are removed with the survivors' shares, and the log's `secagg` table says who missed which
stage; below the threshold t the round is refused: nothing is unmasked, the global model takes no update
(its server step sees a zero update), and the log says at which stage."""
from __future__ import annotations

import numpy as np
import torch

from fedmpi import comm
from fedmpi.crossdevice.exchange import ClientExchange, _assignment
from fedmpi.crossdevice.sampler import assign_to_ranks
from fedmpi.crossdevice.secure_clients import (TAG_ASK, TAG_KEYS, TAG_MASKED, TAG_ROUTED, TAG_SETUP, TAG_SHARES,
                                               TAG_UNMASK)
from fedmpi.secagg import ProtocolError
from fedmpi.secagg.server import Session
from fedmpi.secagg.simulate import STAGES
from fedmpi.core.secure_uploads import decoded_mean, dp_noise_std, encoding, mean_into


def log_table(count: int) -> dict:
    """The log's `secagg` table: per round, each sampled client's stage code (0: took part to the end; 1-4: the
    first of STAGES it missed) and the stage at which a refused round stopped (0: not refused)."""
    return {"round": ((), "i8"), "clients": ((count,), "i8"), "missed": ((count,), "i1"), "refused_at": ((), "i1")}


class SecureClientExchange(ClientExchange):
    def __init__(self, cfg, trainers, group, control, sampler, sizes, up_numel: int, backbone: int, device, dtype,
                 log=None):
        super().__init__(trainers, group, control, sampler, sizes, up_numel, device, dtype, log=log)
        self.secure, self.encoding, self.backbone = cfg.fed.secure_aggregation, encoding(cfg), backbone
        self._theta = torch.empty(backbone, dtype=torch.float64)
        self._mean: np.ndarray | None = None
        self._sizes_up = up_numel
        self.share_std = dp_noise_std(cfg)
        self.noise_std: float | None = None     # with fed.dp: the std per entry of the noise in the round's mean

    def _each_rank(self, values: dict | None, tag: int, what: str) -> None:
        for rank, ks in zip(self.trainers, self._assignment):
            part = None if values is None else {k + 1: values[k + 1] for k in ks if k + 1 in values}
            comm.send(part, rank, tag, what=f"round {self._r + 1}: {what}", timeout_s=self.control.timeout_s,
                      comm=self.control.mpi)

    def _from_ranks(self, tag: int, what: str) -> list:
        return [comm.receive(rank, tag, what=f"round {self._r + 1}: {what}", timeout_s=self.control.timeout_s,
                             comm=self.control.mpi) for rank in self.trainers]

    def post(self, r: int) -> None:
        """Sample round r's clients, tell each trainer rank its share, run the key stages."""
        self._r, self._mean, self._refused = r, None, 0
        self.noise_std = None if self.share_std is None else 0.0      # a refused round adds no noise
        self.clients = self.sampler.sample()
        self._assignment = assign_to_ranks(self.clients, self.sizes, len(self.trainers))
        comm.bcast((r, self._assignment), what=_assignment(r), timeout_s=self.control.timeout_s,
                   comm=self.control.mpi)
        n = len(self.clients)
        self.session = Session(r, [int(k) + 1 for k in self.clients], self.secure.threshold_for(n),
                               self.encoding.bits, self._sizes_up + 1, self.secure.degree(n))
        keys = {u: v for part in self._from_ranks(TAG_KEYS, "the clients' SecAgg keys") for u, v in part.items()}
        setups = self._stage(1, lambda: self.session.receive_keys(keys))
        self._each_rank(setups and {u: (setups[0], self.session.threshold, p) for u, p in setups[1].items()},
                        TAG_SETUP, "the SecAgg session")
        sent = self._from_ranks(TAG_SHARES, "the clients' sealed shares")
        if setups is not None:
            shares = {u: v for part in sent for u, v in part.items()}
            routed = self._stage(2, lambda: self.session.route_shares(shares))
            self._each_rank(routed, TAG_ROUTED, "the sealed shares")

    def _stage(self, code: int, step):
        """step(), or None where the round is refused there (below the threshold)."""
        try:
            return step()
        except ProtocolError as exc:
            if "fewer than the threshold" not in str(exc):
                raise
            self._refused = code
            print(f"note: {exc}; the global model takes no update", flush=True)
            return None

    def is_complete(self) -> bool:
        return all(self.control.mpi.Iprobe(source=rank, tag=TAG_MASKED) for rank in self.trainers)

    def wait(self) -> None:
        sums = self._from_ranks(TAG_MASKED, "the clients' masked sum")
        if not self._refused:
            for members, partial in (s for s in sums if s and s[0]):
                self.session.receive_masked_sum(members, partial)
            ask = self._stage(3, self.session.close_masked)
            for rank in self.trainers:
                comm.send(ask, rank, TAG_ASK, what=f"round {self._r + 1}: the unmasking request",
                          timeout_s=self.control.timeout_s, comm=self.control.mpi)
            if ask is not None:
                answers = {u: a for part in self._from_ranks(TAG_UNMASK, "the clients' unmasking shares")
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
        codes = np.array([STAGES.index(missed[k + 1]) + 1 if k + 1 in missed else 0 for k in self.clients], np.int8)
        self.log.append("secagg", round=self._r, clients=self.clients, missed=codes, refused_at=self._refused)

    def weighted_mean(self, w, out: torch.Tensor) -> torch.Tensor:
        return mean_into(out, self._theta, self._mean)

    def send(self, down: torch.Tensor) -> None:
        self._theta.copy_(down[:self.backbone])
        super().send(down)

    def bytes_per_round(self) -> dict:
        moved = super().bytes_per_round()
        moved["up"] = len(self.trainers) * (self._sizes_up + 1) * self.encoding.dtype.itemsize
        return moved
