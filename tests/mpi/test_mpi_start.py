"""Starting MPI (fedmpi/comm/start.py): the fence after MPI_Init is a barrier held by the launcher, so that no rank
sends an MPI message to one still inside MPI_Init (Open MPI 5 crashes such a rank). Under mpirun here; under
srun across nodes, where a fence without data collection is no barrier, in tests/cluster/test_multinode.py."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from jobs.mpirun import mpirun

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "tests/support/mpi_scripts/launcher_fence.py"
SLEEP_S = 1.5


def fence_waits(output: str) -> dict[int, tuple[bool, float]]:
    """{rank: (fenced, seconds waited)} from the script's lines."""
    found = re.findall(r"^rank (\d+) fenced (True|False) waited ([0-9.]+)$", output, re.M)
    return {int(rank): (fenced == "True", float(waited)) for rank, fenced, waited in found}


def assert_held_until_rank_0_came(output: str, ranks: int) -> None:
    waits = fence_waits(output)
    assert sorted(waits) == list(range(ranks)), output
    assert all(fenced for fenced, _ in waits.values()), output
    assert all(waited > SLEEP_S - 0.5 for rank, (_, waited) in waits.items() if rank != 0), output


def test_the_fence_after_mpi_init_holds_every_rank_until_the_last_one_arrives():
    out = mpirun(3, [SCRIPT, str(SLEEP_S)], timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert_held_until_rank_0_came(out.stdout, 3)


def test_without_a_launcher_there_is_no_fence_to_hold():
    """A process that has not started MPI has no PMIx loaded: nothing is loaded for it, and no fence is made."""
    code = ("import sys; from fedmpi.comm.start import launcher_fence; "
            "print(launcher_fence(), 'mpi4py.MPI' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert (out.returncode, out.stdout.strip()) == (0, "False False"), out.stderr
