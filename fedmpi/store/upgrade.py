"""Checkpoints of earlier formats read as today's: each function takes a part as read from disk and returns it in
today's layout, so the code that restores state knows one layout only. tests/mpi/test_checkpoint.py keeps a part of
each earlier layout."""
from __future__ import annotations


def upgrade_server_part(saved: dict) -> dict:
    """A server part in today's layout. In the earlier layout everything beside Θ, the rule's state and w sat under
    "validation": FV's search state ("fv", "latest") and, in the cross-device runs, the exchange's ("sampler":
    the sampler's generator and the clients' states)."""
    if "validation" not in saved:
        return saved
    old = dict(saved["validation"])
    exchange = old.pop("sampler", {})
    side = {key: value for key, value in old.items() if key in ("fv", "latest")}
    if exchange:                      # the cross-device side work kept nothing of its own
        side = {}
    upgraded = {key: value for key, value in saved.items() if key != "validation"}
    return {**upgraded, "side_work": side, "exchange": exchange}
