"""The server's receives of a round's class payloads (a party's rows or summary in the silo, a client's summary
across devices), one buffer from each sender: each buffer's end is marked before its receive is posted
(message_end.py), so that a message shorter than the buffer is seen afterwards (`reached_end`); on CPU a thread
waits on them (receives.py), so that the round loop can poll for their arrival."""
from __future__ import annotations

import torch

from fedmpi.comm import p2p
from fedmpi.comm.message_end import mark_end
from fedmpi.comm.receives import ReceivesInBackground


class MarkedReceives:
    def __init__(self, device):
        self.background = torch.device(device).type == "cpu"
        self._work: list = []

    def post(self, buffers, sources: list[int], group, tag: int) -> None:
        """One receive into each buffer from its source (in order)."""
        works = []
        for buffer, source in zip(buffers, sources):
            mark_end(buffer)
            works.append(p2p.irecv(buffer, src=source, group=group, tag=tag))
        self._work = [ReceivesInBackground(works)] if self.background and works else works

    def is_complete(self) -> bool:
        return all(work.is_completed() for work in self._work)

    def wait(self) -> None:
        for work in self._work:
            work.wait()
        self._work = []
