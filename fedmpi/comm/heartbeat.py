"""Which ranks stopped answering, when a collective times out or fails: a gloo or NCCL timeout says only that the
group did not complete, not who is missing. Every rank counts up a key of its own in the rendezvous store once a
second (a thread with its own store connection); after a failure, `silent_ranks` reads the counters twice, a few
beats apart, and names the ranks whose counter did not move (frozen, killed, or cut off from rank 0's node) with
their nodes. Counters, not clocks: the nodes' clocks need not agree. A store that does not answer names rank 0's
node. The beats are a few dozen bytes a second per rank."""
from __future__ import annotations

import datetime
import threading
import time

BEAT_S = 1.0
PROBE_BEATS = 3            # the counters are read again this many beats later
STORE_TIMEOUT_S = 5.0
KEY = "fedmpi/beat/{}"

_STATE: dict = {"thread": None, "stop": None, "address": None, "world": 0}


def _client(host: str, port: int, timeout_s: float):
    import torch.distributed as dist

    return dist.TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=timeout_s),
                         wait_for_workers=False)


def start(host: str, port: int, rank: int, world: int) -> None:
    """Beat from now on (once per process; `stop` ends it)."""
    if _STATE["thread"] is not None:
        return
    store = _client(host, port, STORE_TIMEOUT_S)
    store.set(KEY.format(rank), "0")
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(BEAT_S):
            try:
                store.add(KEY.format(rank), 1)
            except Exception:  # noqa: BLE001 - a store that went away: the failure is reported elsewhere
                return

    thread = threading.Thread(target=beat, name="fedmpi-heartbeat", daemon=True)
    thread.start()
    _STATE.update(thread=thread, stop=stop, address=(host, port), world=world)


def stop() -> None:
    """End the beats and wait for the thread: a beat in flight when rank 0's store goes away returns (or fails) inside
    torch, and a daemon thread that does so while the interpreter finalises aborts the process (signal 6)."""
    thread = _STATE["thread"]
    if thread is not None:
        _STATE["stop"].set()
        thread.join(STORE_TIMEOUT_S + BEAT_S)
        _STATE["thread"] = None


def _counters(store, world: int) -> list[int | None]:
    counts = []
    for r in range(world):
        try:
            counts.append(int(store.get(KEY.format(r))))
        except Exception:  # noqa: BLE001 - a rank that never beat
            counts.append(None)
    return counts


def silent_ranks() -> str | None:
    """'ranks 3, 4 on n2' (with nodes.describe_ranks) for the ranks whose beat stopped, 'the rendezvous store on
    NODE (rank 0)' when the store itself does not answer, None when every rank beats (or nothing beats here)."""
    from fedmpi.comm.nodes import describe_ranks, node_of

    if _STATE["address"] is None:
        return None
    host, port = _STATE["address"]
    world = _STATE["world"]
    try:
        store = _client(host, port, STORE_TIMEOUT_S)
        before = _counters(store, world)
        time.sleep(PROBE_BEATS * BEAT_S)
        after = _counters(store, world)
    except Exception:  # noqa: BLE001 - no store: rank 0's node (or the link to it) is what went silent
        node = node_of(0)
        return f"the rendezvous store on {'node ' + node if node else 'rank 0'} (rank 0)"
    silent = [r for r in range(world) if after[r] is None or after[r] == before[r]]
    return describe_ranks(silent) if silent else None
