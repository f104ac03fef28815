"""The server's upload check in the running system (fedmpi/aggregation/upload_check.py), under mpirun on the small
3-party layout (server + parties a, b, c of one rank each, PFM, float32, 4 rounds of K = 2):

- party b sends a sign-flipped update scaled by 10^6 (`parties.b.attack.scale=-1e6`): with FV (deterministic, on
  the server) and without, the default check excludes b in every round, the run completes with finite losses and a
  finite global model, and the log holds each party's update norm (b's over 1000 x the others') and the
  exclusion; FV's candidates stay finite (b's row is a zero update);
- b's upload is not finite (`scale=1e300` overflows float32): excluded, its norm logged as not finite;
- the honest twin raises nothing: no exclusion, the parties' norms within 3 x each other's median (the default
  norm_ratio is 10);
- the 10^6 attack aggregated (`fed.upload_check.action=warn`) breaks the global model: the run stops with one line
  from the server naming the round and b's upload of round 1 with its norms, nothing from the trainers, no Python
  traceback, exit status 3, no process left; the log keeps the rounds up to the one that broke Θ, and the newest
  checkpoint is the one before it.

The first four are runs of the session's shared launch (tests/support/shared_runs.py); the last stops, so it is a
launch of its own."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from fedmpi.aggregation.upload_check import judge
from fedmpi.errors import EXIT_DIVERGED
from fedmpi.store import checkpoint as ck
from fedmpi.store.h5log import LogReader
from jobs.mpirun import mpirun
from mpi_scripts.ckpt_common import error_lines
from shared_runs import data_root_of, declare

THREE = ["parties=[{name: a, ranks: 1, data: {style: ms1m, identities: 8, images_per_identity: 4}},"
         " {name: b, ranks: 1, data: {style: ga, identities: 6, images_per_identity: 4}},"
         " {name: c, ranks: 1, data: {style: vgg, identities: 5, images_per_identity: 4}}]",
         "data.image_size=16", "data.workers=0", "data.val_pairs_per_fold=4", "data.val_sets=[lfw]",
         "model.width=0.125", "model.embedding_size=16", "model.scale=16.0", "optim.batch_size=4", "optim.epochs=1",
         "optim.steps_per_epoch=8", "optim.milestones=[]", "fed.K=2", "eval.every=0", "fed.algorithm=pfm"]
ROUNDS, B = 4, 1
FV = ["fv.enabled=true", "fv.placement=server", "fv.iterations_per_round=1", "fv.T=2"]
ATTACK = "parties.b.attack.scale=-1e6"
HONEST = declare("upload-honest-fv", [*THREE, *FV])
ATTACKED = {"fv": declare("upload-1e6-fv", [*THREE, *FV, ATTACK]), "no fv": declare("upload-1e6", [*THREE, ATTACK])}
NOT_FINITE = declare("upload-not-finite", [*THREE, "parties.b.attack.scale=1e300"])


def tables(run: Path) -> dict:
    with LogReader(run / "log.h5") as log:
        return {"rounds": log.table("rounds"), "fv": log.table("fv")}


def final_theta(run: Path) -> torch.Tensor:
    return torch.load(f"{run}.pt")["theta"]


def test_an_honest_run_raises_nothing(shared_runs):
    rounds = tables(shared_runs[HONEST])["rounds"]
    norms = rounds["update_norm"]
    assert norms.shape == (ROUNDS, 3) and (norms > 0).all() and np.isfinite(norms).all()
    assert not rounds["uploads_excluded"].any()
    assert max(judge(row, 10.0)[0].max() for row in norms) < 3


@pytest.mark.parametrize("fv", list(ATTACKED))
def test_a_party_scaled_by_a_million_is_excluded_every_round_and_the_run_completes(shared_runs, fv):
    run = shared_runs[ATTACKED[fv]]
    logged = tables(run)
    rounds = logged["rounds"]
    assert list(rounds["round"]) == list(range(ROUNDS))
    assert rounds["uploads_excluded"].tolist() == [[0, 1, 0]] * ROUNDS
    norms = rounds["update_norm"]
    assert (norms[:, B] > 1000 * np.maximum(norms[:, 0], norms[:, 2])).all()
    assert np.isfinite(rounds["loss"]).all() and torch.isfinite(final_theta(run)).all()
    if fv == "fv":       # b's row is a zero update: every candidate FV scored was finite
        assert len(logged["fv"]["round"]) == ROUNDS - 1 and np.isfinite(logged["fv"]["raw_scores"]).all()


def test_an_upload_that_is_not_finite_is_excluded_and_logged(shared_runs):
    run = shared_runs[NOT_FINITE]
    rounds = tables(run)["rounds"]
    assert not np.isfinite(rounds["update_norm"][:, B]).any() and np.isfinite(rounds["update_norm"][:, [0, 2]]).all()
    assert rounds["uploads_excluded"].tolist() == [[0, 1, 0]] * ROUNDS
    assert torch.isfinite(final_theta(run)).all()


def test_the_attack_aggregated_stops_the_run_in_one_line_naming_it_before_a_checkpoint_of_it(shared_runs,
                                                                                             tmp_path):
    data = data_root_of(shared_runs[HONEST])                            # the shared runs' synthetic sets
    out = mpirun(4, ["-m", "fedmpi.run", *THREE, ATTACK, "fed.upload_check.action=warn", "checkpoint.every=1",
                     f"checkpoint.keep={ROUNDS}", f"log.dir={tmp_path}", "log.name=warned", f"data.root={data}"],
                 timeout=240)
    assert out.returncode == EXIT_DIVERGED, out.stdout[-2000:] + out.stderr[-2000:]
    assert "Traceback" not in out.stdout + out.stderr
    lines = error_lines(out.stderr)
    assert len(lines) == 1, lines                                          # the server's, not every trainer's
    culprit = (r"rank 0 \(server\): round (?P<round>\d): the global model is no longer finite after the aggregation; "
               r"out-of-range uploads aggregated: b in rounds? 1\b[^(]*\((in round 1: )?‖θ_b − Θ‖ = \S+, \S+ x the "
               r"median of the others' \(\S+\)\)")
    stopped = re.match(culprit, lines[0])
    assert stopped, lines[0]
    assert re.search(r"^round 1: upload of b out of range: ‖θ_b − Θ‖ = .*; aggregated as it is", out.stdout, re.M)
    broken = int(stopped["round"])
    with LogReader(tmp_path / "warned" / "log.h5") as log:
        assert list(log.table("rounds")["round"]) == list(range(broken))       # the round that broke Θ logged
    assert [r for r, _ in ck.list_checkpoints(tmp_path / "warned" / "ckpt")] == list(range(1, broken))
    assert processes_naming(tmp_path) == []


def processes_naming(folder: Path) -> list[str]:
    """The processes whose command line names `folder` (the ranks of a launch into it)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if str(folder) in (proc / "cmdline").read_bytes().decode(errors="replace"):
                found.append(proc.name)
        except OSError:     # ended while we looked
            pass
    return found
