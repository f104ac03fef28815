"""The memory check of a face-client population under mpirun (fedmpi/memory/check.py, judge_client_states): the
server keeps W for all M clients (M x d float32), so MS1M's 85,742 people at d = 512 (0.2 GB) on a server node said
to have 600 MB are refused before torch is imported, in one line naming the population that fits, every rank
exiting; that population then passes the check (the launch goes on to the next refusal: a log.name that exists)."""
from __future__ import annotations

import re

from fedmpi.memory import available as avail
from jobs.mpirun import mpirun

MS1M = ["clients.population=85742", "clients.faces.identities=85742", "model.embedding_size=512"]


def launch(tmp_path, *overrides):
    args = ["-m", "fedmpi.run", "--config", "configs/faces_devices.yaml", *MS1M, *overrides, f"log.dir={tmp_path}",
            "log.name=taken", f"data.root={tmp_path / 'data'}"]
    return mpirun(3, args, timeout=120, env={avail.AVAILABLE_ENV: "600M"})


def test_a_population_whose_w_cannot_fit_is_refused_with_the_population_that_fits(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "log.h5").write_text("")
    out = launch(tmp_path)
    assert out.returncode != 0
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(
        "error: run.memory_check: fedaws keeps each client's state on the server: up to 85,742 clients x 2.0 KB = "
        "0.2 GB; the server's node has 0.6 GB available; clients.population="), out.stderr
    fits = int(re.search(r"clients\.population=(\d+) fits", errors[0]).group(1))
    assert 0 < fits < 85742 and not (tmp_path / "data").exists()
    out = launch(tmp_path, f"clients.population={fits}")
    assert out.returncode != 0 and "run.memory_check" not in out.stderr
    assert "log.name: " in out.stderr and "already exists" in out.stderr, out.stderr
