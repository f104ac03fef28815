"""The heartbeat's thread is gone when `stop` returns: a daemon thread left inside a store call while the
interpreter finalises aborts the process (signal 6 at the end of an otherwise finished launch)."""
import datetime
import socket

import torch.distributed as dist

from fedmpi.comm import heartbeat


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_stop_returns_after_the_beating_thread_has_ended():
    port = free_port()
    master = dist.TCPStore("127.0.0.1", port, is_master=True, timeout=datetime.timedelta(seconds=5),
                           wait_for_workers=False)
    heartbeat.start("127.0.0.1", port, rank=0, world=1)
    thread = heartbeat._STATE["thread"]
    assert thread.is_alive() and master.get(heartbeat.KEY.format(0)) == b"0"
    heartbeat.stop()
    assert not thread.is_alive() and heartbeat._STATE["thread"] is None
    heartbeat._STATE.update(stop=None, address=None, world=0)
