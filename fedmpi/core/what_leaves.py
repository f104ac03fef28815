"""The start-up line that says what crosses the network from each participant, and the run log's words for it
(docs/BASELINES.md, "What crosses the network"): the setting says what its participant sends (a silo party the
rule's `leaves_party`; a face client its backbone with its class embeddings or DP clusters), and under
fed.secure_aggregation the line adds that the server sees only the masked sum."""
from __future__ import annotations

MANY = {"party": "parties", "client": "clients"}


def leaves(cfg, sent: str, who: str = "party") -> str:
    """`sent`, in words, as it crosses: masked under secure aggregation."""
    s = cfg.fed.secure_aggregation
    if not s.enabled:
        return sent
    return (f"{sent}, masked ({s.mode}: the server sees only the {MANY[who]}' weighted sum, their weights summed "
            f"beside it)")


def line(cfg, sent: str, who: str = "party") -> str:
    return f"what leaves each {who}: {leaves(cfg, sent, who)}"
