import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def shared_runs(tmp_path_factory):
    """{name: run folder} of every run declared with shared_runs.declare, made in one launch (tests/shared_runs.py)."""
    from shared_runs import launch_all

    return launch_all(tmp_path_factory.mktemp("shared-runs"))
