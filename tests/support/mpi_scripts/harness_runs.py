"""mpirun worker of the bit-identical harness (tests/support/run_digest.py): the runs of runs_in_one_launch.py, with
`secrets.randbits` (the OS entropy of distributed DP's noise shares, core/secure_uploads.py, and of SecAgg+'s
neighbour graph) drawn from a generator seeded by the run's index and the rank, so that a run with distributed DP
repeats bit for bit. Only to compare one code with another: in a real run the noise must be unpredictable (spec
§8.8). The keys and masks keep their OS entropy: the masks cancel in the sum.

usage: harness_runs.py PLAN.json"""
from __future__ import annotations

import json
import os
import random
import secrets
import sys
from pathlib import Path

from runs_in_one_launch import run_all


def seeded_entropy(run: int) -> None:
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    secrets.randbits = random.Random(f"fedmpi-harness {run} {rank}").getrandbits


if __name__ == "__main__":
    sys.exit(run_all(json.loads(Path(sys.argv[1]).read_text()), before=seeded_entropy))
