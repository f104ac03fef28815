"""The trainer ranks' round loop, the same for every setting. A trainer role provides:
  start(start_round)        before the first round (the cross-device trainers take the first global payload)
  prepare(r, lr)            before the round's training (the silo classifier's lr; the cross-device rank's
                            clients of the round and their states)
  train(r, lr) -> trained   the round's local training, timed
  exchange(r, trained)      the upload, the new global payload, the rule's state after it (PFM's M)
  report(r, trained, s)     the round's statistics to the server (s: the seconds train took)
  checkpoint_parts()        this rank's part of a checkpoint
"""
from __future__ import annotations

import time

from fedmpi.core import signals


def run_trainer_rounds(role, rounds: int, lr_at_round, start_round: int = 0, checkpointer=None) -> int:
    """Rounds start_round .. rounds - 1; the exit status (75: preempted at a round boundary)."""
    role.start(start_round)
    for r in range(start_round, rounds):
        lr = lr_at_round(r)
        role.prepare(r, lr)
        started = time.perf_counter()
        trained = role.train(r, lr)
        seconds = time.perf_counter() - started
        role.exchange(r, trained)
        role.report(r, trained, seconds)
        if checkpointer and checkpointer.round_end(r + 1, role.checkpoint_parts):
            return signals.EXIT_PREEMPTED
    return 0
