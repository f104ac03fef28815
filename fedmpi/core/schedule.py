"""When the held-out evaluation runs, the same for every setting: with eval.every = N > 0, after the first
round, every N rounds and after the last; with eval.every = 0, never."""


def evaluation_due(r: int, every: int, rounds: int) -> bool:
    """Round r (0-based) ends with an evaluation."""
    return every > 0 and (r == 0 or r == rounds - 1 or (r + 1) % every == 0)
