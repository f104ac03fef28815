"""jobs.mpirun, the one launcher of the tests, benchmarks and local sweeps: a launch that runs past its limit
raises TimeoutExpired and leaves no rank behind (mpirun is asked to end its ranks before it is killed; killed
outright, it orphaned them, and a hung test then kept its ranks spinning on the machine)."""
import os
import subprocess
import time

import pytest

from jobs.mpirun import mpirun

HANG = """
import os, sys, time
open(os.path.join(sys.argv[1], f"rank-{os.getpid()}"), "w").close()
while True:
    time.sleep(1)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_launch_past_its_limit_raises_and_leaves_no_rank_running(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    with pytest.raises(subprocess.TimeoutExpired):
        mpirun(2, [str(script), str(tmp_path)], timeout=6)
    pids = [int(p.name.split("-")[1]) for p in tmp_path.glob("rank-*")]
    assert len(pids) == 2, "the ranks did not start within the limit"
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [pid for pid in pids if alive(pid)]
    for pid in left:
        os.kill(pid, 9)
    assert not left, f"ranks {left} outlived their launch"
