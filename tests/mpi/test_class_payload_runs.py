"""A hostile party's class payload one row short, in the running silo (server + parties a, b, c of one rank each,
4 rounds of K = 2): `parties.b.attack.short_rows=1` has b's leader send its FedAwS rows (W_b, 6 x 16) or its
PrivacyFace clusters (2 x 18) one row short. gloo fills the front of the server's buffer and says nothing; the
buffer's marked end (comm/message_end.py) tells the server, which names b in one line every round, leaves it out of
the class step (FedAwS: a and c stepped on as if b were absent, b's reply none, so it keeps its own rows;
PrivacyFace: b's clusters not relayed) and the run completes with finite losses, as it does for a hostile backbone."""
from __future__ import annotations

import numpy as np
import pytest

from fedmpi.store.h5log import LogReader
from jobs.mpirun import mpirun
from test_upload_check_runs import ROUNDS, THREE

METHODS = {"fedaws": ["fed.algorithm=fedaws"],
           "privacyface": ["fed.algorithm=privacyface", "fed.options.kappa=0.2", "fed.options.min_count=2",
                           "fed.options.clusters=2", "fed.options.candidates=64"]}
SHORT = {"fedaws": "6 x 16", "privacyface": "2 x 18"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("short")
    out = {}
    for name, rule in METHODS.items():
        args = ["-m", "fedmpi.run", *THREE, *rule, "parties.b.attack.short_rows=1", f"data.root={tmp / 'data'}",
                f"log.dir={tmp}", f"log.name={name}"]
        result = mpirun(4, args, timeout=400)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
        with LogReader(tmp / name / "log.h5") as log:
            out[name] = result.stdout, log.table("rounds"), log.table("classes")
    return out


@pytest.mark.parametrize("name", list(METHODS))
def test_a_payload_one_row_short_is_named_every_round_and_the_run_completes(runs, name):
    stdout, rounds, classes = runs[name]
    said = [line for line in stdout.splitlines() if "class payload of party" in line]
    assert said == [f"round {r + 1}: the class payload of party b is wrongly shaped (shorter than the {SHORT[name]} "
                    f"values the server expects of it): left out of the round's class step" for r in range(ROUNDS)]
    assert len(rounds["round"]) == ROUNDS and np.isfinite(rounds["loss"]).all()
    assert classes["round"].tolist() == list(range(ROUNDS))
