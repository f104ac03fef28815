"""Control messages with a deadline (fedmpi.comm.receive, gather, bcast, allreduce_max), under mpirun: they
deliver what was sent, a rank that does not answer ends the wait after the timeout with a line naming what was
awaited, the ranks and the timeout, and an idle wait sleeps instead of spinning."""
from __future__ import annotations

import json
from pathlib import Path

from jobs.mpirun import mpirun

SCRIPT = Path(__file__).resolve().parents[1] / "support" / "mpi_scripts" / "deadline_receive.py"


def test_deadline_receive_gather_bcast_and_allreduce():
    result = mpirun(3, [str(SCRIPT)], timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    late = out["late"]
    assert late["value"] == {"loss": 1.5} and late["error"] is None
    idle = out["idle"]
    assert idle["error"] == "no round 4 statistics from rank 2 within 2 s"
    assert 2 <= idle["wall"] < 10
    assert idle["cpu"] < 0.2 * idle["wall"], idle        # it naps: a busy poll would use about 1 s per s
    assert out["gather"]["error"] == "round 5 statistics (group fed): no answer from rank 2 within 1 s"
    assert out["bcast"]["value"] == "go" and out["allreduce"]["value"] == 5
