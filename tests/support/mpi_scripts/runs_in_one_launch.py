"""mpirun worker of the tests' shared launches: jobs/one_launch.py's runs, one after the other in one launch (its
docstring says what each run starts from). Kept as a script path beside the other mpirun workers the tests launch.

usage: runs_in_one_launch.py PLAN.json   (PLAN: a JSON list of argument lists, each what `python -m fedmpi.run`
would be given). Ends with the status of the first run that fails, else 0."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from jobs.one_launch import run_all

__all__ = ["run_all"]

if __name__ == "__main__":
    sys.exit(run_all(json.loads(Path(sys.argv[1]).read_text())))
