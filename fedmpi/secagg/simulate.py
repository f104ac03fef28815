"""One SecAgg / SecAgg+ round run in one process: every participant's and the server's stages in order, with
participants that miss a stage (`drop`: stage -> ids; a participant dropped at one stage misses every later one).
The tests' oracle, the bench's timing, and the cross-device cohort's simulation of its virtual clients."""
from __future__ import annotations

import random

import numpy as np

from fedmpi.secagg.errors import ProtocolError
from fedmpi.secagg.participant import Participant
from fedmpi.secagg.server import Session

STAGES = ("advertise", "share keys", "masked input", "unmask")


def run_round(inputs: dict[int, np.ndarray], bits: int, threshold: int, degree: int | None = None,
              drop: dict[str, set[int]] | None = None, round_index: int = 0,
              rng: random.Random | None = None) -> tuple[np.ndarray, Session]:
    """(Σ over the survivors of their inputs mod 2^bits, the server's session: `dropped_at`, `u3`)."""
    drop = drop or {}
    session = Session(round_index, list(inputs), threshold, bits, next(iter(inputs.values())).size, degree, rng)
    present = set(inputs)

    def attend(stage: str) -> list[int]:
        present.difference_update(drop.get(stage, ()))
        return sorted(present)

    people = {u: Participant(u, bits) for u in inputs}
    sid, peers = session.receive_keys({u: people[u].advertise() for u in attend("advertise")})
    sent = {}
    for u in attend("share keys"):
        try:
            sent[u] = people[u].share_keys(sid, threshold, peers[u])
        except ProtocolError:      # fewer than t of its neighbours advertised: it leaves the round (as Flower's)
            present.discard(u)
    routed = session.route_shares(sent)
    present.intersection_update(routed)     # the server leaves out a participant fewer than t hold the shares of
    for u in attend("masked input"):
        session.receive_masked(u, people[u].masked_input(routed[u], inputs[u]))
    survivors, dropped = session.close_masked()
    answers = {u: people[u].unmask(survivors, dropped) for u in attend("unmask")}
    return session.unmask(answers), session


def missed_stage(rate: float, rng) -> str | None:
    """The first stage a participant misses, each with probability `rate` independently, or None (it stays)."""
    for stage in STAGES:
        if rng.random() < rate:
            return stage
    return None


def draw_dropouts(participants: list[int], rate: float, rng: random.Random) -> dict[str, set[int]]:
    """stage -> who misses it (a simulated client that went away; the server learns it only by its silence)."""
    drop: dict[str, set[int]] = {stage: set() for stage in STAGES}
    for u in sorted(participants):
        stage = missed_stage(rate, rng)
        if stage:
            drop[stage].add(u)
    return drop
