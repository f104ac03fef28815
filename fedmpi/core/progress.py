"""The server's console output: one progress line per round and a closing summary."""
from __future__ import annotations

import sys
import time

import numpy as np


def loss_text(value: float) -> str:
    """A loss with the digits it has: 3 decimals from 0.1 up (14.395), 3 significant digits below (2.31e-04, where
    3 decimals would print 0.000)."""
    return f"{value:.3f}" if value == 0 or not np.isfinite(value) or abs(value) >= 0.1 else f"{value:.2e}"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    def __init__(self, rounds: int, parties: list[str], stream=sys.stdout):
        self.rounds = rounds
        self.parties = parties
        self.stream = stream
        self.first_round = 0   # 1-based, the first this launch ran (a resume starts after its checkpoint)
        self.last_round = 0
        self.first_loss: np.ndarray | None = None
        self.last_loss: np.ndarray | None = None
        self.started = time.time()

    def line(self, r: int, loss: np.ndarray, images_per_s: float, wall_time: float, note: str = "") -> None:
        """`note`: the side work's (FV iterations, the latest test accuracy), at the end of the line."""
        done = r + 1
        if self.first_loss is None:
            self.first_loss, self.first_round = loss.copy(), done
        self.last_loss, self.last_round = loss.copy(), done
        eta = wall_time / done * (self.rounds - done)
        losses = " ".join(f"{name} {loss_text(value)}" for name, value in zip(self.parties, loss))
        self.stream.write(f"round {done}/{self.rounds}  loss {losses}  {images_per_s:.0f} img/s  "
                          f"elapsed {_duration(wall_time)}  eta {_duration(eta)}{'  ' + note if note else ''}\n")
        self.stream.flush()

    def summary(self, log_path, extra: str = "") -> None:
        out = [f"log: {log_path}"]
        if self.first_loss is not None:
            for name, a, b in zip(self.parties, self.first_loss, self.last_loss):
                out.append(f"  {name}: loss {loss_text(a)} (round {self.first_round}) -> {loss_text(b)} "
                           f"(round {self.last_round})")
        out.append(f"  wall time {_duration(time.time() - self.started)}")
        if extra:
            out.append(extra)
        self.stream.write("\n".join(out) + "\n")
        self.stream.flush()
