"""The server's client for the validators: post a backbone to every validator (hosted in this process or on
dedicated ranks, protocol in fv/validator.py) and advance their replies one small step at a time, so that
the round loop can look after the exchange in between."""
from __future__ import annotations

from collections import deque

import torch

from fedmpi import comm
from fedmpi.comm import p2p
from fedmpi.comm.control import Backoff
from fedmpi.fv.validator import SCORE, STOP, TAG_CONTROL, TAG_REPLY, Validator, assign_sets


class Request:
    """One backbone sent to every validator; the replies of all sets gathered as they come in."""

    def __init__(self, word: str, flat: torch.Tensor, val_sets: list[str]):
        self.word, self.flat, self.val_sets = word, flat, val_sets
        self.replies: dict = {}

    @property
    def done(self) -> bool:
        return len(self.replies) == len(self.val_sets)

    def result(self) -> dict:
        return {name: self.replies[name] for name in self.val_sets}


class HostedEndpoint:
    """Sets hosted on the server itself: each progress() step computes one set of the oldest request, or, with
    `scores_first`, of the oldest FV scoring request while there is one: in deterministic FV the trainers wait for
    the round's FV iterations, so an evaluation queued before them must not hold them up (it runs beside the
    uploads instead, on the Θ it was posted with, so its figures do not change)."""

    def __init__(self, validator: Validator, scores_first: bool = False):
        self.validator = validator
        self.names = validator.names
        self.scores_first = scores_first
        self._queue: deque[tuple[Request, str]] = deque()
        self._loaded: Request | None = None

    def post(self, request: Request) -> None:
        self._queue.extend((request, name) for name in self.names)

    def progress(self) -> bool:
        if not self._queue:
            return False
        index = next((i for i, (request, _) in enumerate(self._queue) if request.word == SCORE), 0) \
            if self.scores_first else 0
        request, name = self._queue[index]
        del self._queue[index]
        if self._loaded is not request:
            self.validator.load(request.flat)
            self._loaded = request
        if request.word == SCORE:
            request.replies[name] = self.validator.score_set(name)
        else:
            request.replies[name] = self.validator.evaluate_set(name)
        return True

    def stop(self) -> None:
        self._queue.clear()


class RemoteEndpoint:
    """A dedicated validator rank: requests go out as control word + backbone, replies come back over MPI.
    At most IN_FLIGHT backbones are on their way at a time (the one being scored and the next): the validator
    takes the next backbone only once it has answered the last, and NCCL times a send from when it is issued,
    so T sends issued at once would leave the last waiting T − 1 scorings against run.collective_timeout_s."""
    IN_FLIGHT = 2

    def __init__(self, rank: int, names: list[str], group):
        self.rank, self.names, self.group = rank, list(names), group
        self._queue: deque[tuple[Request, object]] = deque()
        self._waiting: deque[Request] = deque()

    def post(self, request: Request) -> None:
        self._waiting.append(request)
        self._send_next()

    def _send_next(self) -> None:
        while self._waiting and len(self._queue) < self.IN_FLIGHT:
            request = self._waiting.popleft()
            comm.mpi_comm().send(request.word, dest=self.rank, tag=TAG_CONTROL)
            # the request keeps its backbone unchanged until the reply is in; the send has completed by then
            self._queue.append((request, p2p.isend(request.flat, dst=self.rank, group=self.group)))

    def progress(self) -> bool:
        mpi = comm.mpi_comm()
        if not self._queue or not mpi.Iprobe(source=self.rank, tag=TAG_REPLY):
            return False
        reply = mpi.recv(source=self.rank, tag=TAG_REPLY)
        request, send = self._queue.popleft()
        send.wait()
        missing = set(self.names) - set(reply)
        if missing:
            raise RuntimeError(f"validator rank {self.rank}: reply lacks sets {sorted(missing)}")
        request.replies.update({name: reply[name] for name in self.names})
        self._send_next()
        return True

    def stop(self) -> None:
        while self._queue:  # collect what is still on its way, so no message is left unreceived
            reply = comm.receive(self.rank, TAG_REPLY, what="validator reply", timeout_s=comm.collective_timeout_s())
            request, send = self._queue.popleft()
            send.wait()
            request.replies.update(reply)
            self._send_next()
        comm.mpi_comm().send(STOP, dest=self.rank, tag=TAG_CONTROL)


class ValidatorPool:
    """The server's view of every validator: post a backbone to all, advance the replies a step at a time."""

    def __init__(self, endpoints: list, val_sets: list[str]):
        # dedicated ranks first: they start on a request while the server works on its hosted sets
        self.endpoints = sorted(endpoints, key=lambda e: isinstance(e, HostedEndpoint))
        self.val_sets = list(val_sets)

    @classmethod
    def build(cls, cfg, validator_ranks: list[int], group, parts) -> "ValidatorPool":
        """The dedicated validator ranks (over `group`, server + validators), each with its share of the sets, or
        one validator hosted here on a model of the run's parts."""
        val_sets = list(cfg.data.val_sets)
        if validator_ranks:
            shares = assign_sets(val_sets, len(validator_ranks))
            endpoints = [RemoteEndpoint(rank, names, group) for rank, names in zip(validator_ranks, shares)]
        else:
            endpoints = [HostedEndpoint(Validator(cfg, val_sets, parts.new_model(), parts.device),
                                        scores_first=cfg.fv.iterations_per_round > 0)]
        return cls(endpoints, val_sets)

    def post(self, word: str, flat: torch.Tensor) -> Request:
        request = Request(word, flat, self.val_sets)
        for endpoint in self.endpoints:
            endpoint.post(request)
        return request

    def progress(self) -> bool:
        """One step on every validator (a reply received, or one hosted set computed); False if none moved."""
        moved = False
        for endpoint in self.endpoints:
            moved = endpoint.progress() or moved
        return moved

    def wait(self, requests: list[Request]) -> None:
        backoff = Backoff()
        while not all(r.done for r in requests):
            backoff.after(self.progress())

    def stop(self) -> None:
        for endpoint in self.endpoints:
            endpoint.stop()
