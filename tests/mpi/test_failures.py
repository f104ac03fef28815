"""Failures never hang and never damage what a run already wrote: a killed rank ends the job, a diverged loss
stops it with one line from the server naming the round and the uploads, and bad inputs across config, files and launch end
with a one-line error and a non-zero exit, leaving existing checkpoints and logs as they were."""
from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable

import pytest

from fedmpi.errors import EXIT_DIVERGED
from fedmpi.store import checkpoint as ck
from fedmpi.store.h5log import LogReader
from mpi_scripts.ckpt_common import (WORLD, assert_same_run, copy_run, error_lines, reference_run, rounds_logged,
                                     sibling_run, snapshot)
from jobs.mpirun import ROOT, mpi_env, mpirun_binary

BAD_INPUT_TIMEOUT_S = 120  # a failed start imports torch on 4 ranks (2 busy cores: ~30 s; 60 s hit once at load 11-14)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return reference_run(tmp_path_factory)


# ---------------------------------------------------------------- a rank dies, a loss diverges


def test_a_trainer_killed_with_sigkill_ends_the_job_within_60_s_and_the_run_resumes(reference, tmp_path):
    run = sibling_run(reference, tmp_path, "killed")
    stamp = tmp_path / "killed-at"
    killed = run.launch_signalled(rank=3, round_=5, signal="KILL", stamp=stamp, timeout=240)  # party b's rank
    assert killed.returncode != 0, killed.stdout + killed.stderr
    assert time.time() - float(stamp.read_text()) < 60       # from the kill to mpirun's exit
    # what the run wrote before: rounds 1-4 logged (the log reads as it is), the round-3 checkpoint whole
    assert rounds_logged(run) == [0, 1, 2, 3]
    assert [r for r, _ in ck.list_checkpoints(run.ckpt)] == [3]
    ck.check_complete(run.ckpt / "round_000003")

    resumed = run.launch("--resume", "auto")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert_same_run(reference, run)


def test_a_trainer_that_stops_answering_ends_the_job_after_the_collective_timeout(reference, tmp_path):
    run = sibling_run(reference, tmp_path, "stopped")
    stamp = tmp_path / "stopped-at"
    result = run.launch_signalled(3, 2, "STOP", "run.collective_timeout_s=10", stamp=stamp, cont_after=90,
                                  timeout=150)
    assert result.returncode != 0, result.stdout + result.stderr
    assert time.time() - float(stamp.read_text()) < 45   # from the stop to mpirun's exit: long before SIGCONT
    first = error_lines(result.stderr)[0]
    # whoever waits first says it: the server or party a, waiting on a group rank 3 (party b) is part of
    # ... and names the rank that went silent (its heartbeat stopped) with its node
    assert re.fullmatch(r"rank \d \((server|trainer:a)\): CommTimeout: round 2: .* over group (leaders \(ranks 0, 1, "
                        r"3 on \S+\)|a \(ranks 1, 2 on \S+\)): no answer within run\.collective_timeout_s=10 s \(.*\); "
                        r"stopped answering: rank 3 on \S+", first), first


def test_a_nan_loss_stops_the_run_naming_the_round_and_the_uploads_and_keeps_the_checkpoint(reference, tmp_path):
    """Every party diverges at once (lr 1e30 from round 4): one line from the server names the round and says that
    no out-of-range upload was aggregated before (tests/mpi/test_upload_check_runs.py has a party to blame)."""
    run = copy_run(reference, tmp_path, "nan", drop_after=3)
    before = snapshot(run.ckpt)
    result = run.launch("--resume", "auto", "--allow-config-changes", "optim.lr=1e30")
    assert result.returncode == EXIT_DIVERGED, result.stderr
    lines = error_lines(result.stderr)
    assert len(lines) == 1 and re.fullmatch(r"rank 0 \(server\): round 4: .*(not finite|no upload is left to "
                                            r"aggregate).*; no out-of-range upload was aggregated.*", lines[0]), lines
    assert "Traceback" not in result.stderr
    assert snapshot(run.ckpt) == before
    assert rounds_logged(run) == [0, 1, 2]     # the resumed log, readable after the abort
    with LogReader(run.folder / "log.h5") as log:   # the accepted change, and from which round it applies
        assert json.loads(log.f.attrs["config_changes"]) == [{"round": 3, "changes": {"optim.lr": [0.1, 1e30]}}]
        assert "lr: 1.0e+30" in log.config_yaml


@pytest.fixture
def small_volume(reference, tmp_path):
    """A tmpfs that holds two and a half of the reference's checkpoints (so a run that checkpoints every round with
    keep 2 fills it at round 3), unmounted afterwards; skipped where mounting needs a privilege this user lacks."""
    one = sum(p.stat().st_size for p in (reference.ckpt / "round_000003").iterdir())
    volume = tmp_path / "small"
    volume.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={int(2.5 * one) // 1024}k", "tmpfs", str(volume)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"a small volume needs mount -t tmpfs: {mounted.stderr.strip()}")
    try:
        yield volume
    finally:
        subprocess.run(["umount", str(volume)], capture_output=True)


def test_a_disk_that_fills_during_a_checkpoint_says_so_once_naming_the_path_and_keeps_the_newest(reference,
                                                                                                 small_volume,
                                                                                                 tmp_path):
    """A full disk is not a failed collective: the server says once, with no traceback, that the checkpoint of
    round 3 did not fit, names its folder and the newest complete checkpoint, which stays intact; the job ends
    non-zero."""
    run = sibling_run(reference, tmp_path, "full")
    ckpt = small_volume / "ck"
    result = run.launch("checkpoint.every=1", f"checkpoint.dir={ckpt}")
    assert result.returncode != 0, result.stdout + result.stderr
    lines, at = error_lines(result.stderr), re.escape(str(ckpt))
    assert len(lines) == 1 and re.fullmatch(
        rf"rank 0 \(server\): DiskFull: round 3: the disk is full: the checkpoint {at}/round_000003 could not be "
        rf"written \({at}/round_000003/\S+\.h5: no space left on the device \(.* free of .*\).*\); the newest "
        rf"complete checkpoint, {at}/round_000002, is intact \(--resume auto continues from it\); free space "
        rf"there or set checkpoint\.dir", lines[0]), result.stderr
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr
    assert "CommFailure" not in result.stderr
    assert [r for r, _ in ck.list_checkpoints(ckpt)] == [1, 2]
    ck.check_complete(ckpt / "round_000002")


# ---------------------------------------------------------------- bad inputs


BAD_YAML = "parties: [\n"


def _corrupt_rec(base):
    folder = base / "badrec"
    folder.mkdir(exist_ok=True)
    (folder / "train.rec").write_bytes(bytes(range(256)) * 8)
    (folder / "train.idx").write_text("0\t0\n1\t1000\n2\t99999\n")
    return folder


def _latin1_config(run):
    (run.base / "latin1.yaml").write_bytes("run:\n  seed: 1  # caf\u00e9\n".encode("latin-1"))


def _file_in_the_way(run):
    (run.base / "a-file").write_text("not a folder")


def _truncate_part(run):
    part = run.ckpt / "round_000006" / "party-a-1.h5"
    with open(part, "r+b") as f:
        f.truncate(part.stat().st_size // 2)
    return run.ckpt / "round_000006"


def _drop_manifest(run):
    (run.ckpt / "round_000006" / ck.MANIFEST).unlink()
    return run.ckpt / "round_000006"


def _garble_manifest(run):
    (run.ckpt / "round_000006" / ck.MANIFEST).write_text("{not json")
    return run.ckpt / "round_000006"


@dataclass(frozen=True)
class Bad:
    ranks: int                    # 1: launched without mpirun (the error comes before the world size check)
    args: tuple[str, ...]         # may name {base}, {ckpt}, {target}
    error: str                    # the first error line, a regular expression
    prepare: Callable | None = None   # run -> {target}; damages a copy of the run when own_copy
    own_copy: bool = False
    accepted: bool = False        # the launch is accepted (the error comes from a rank at work): torch is imported


BAD_INPUTS = {
    "unknown key": Bad(1, ("optim.lrr=0.1",), r"error: optim\.lrr: unknown key \(known: .*\)"),
    "bad type": Bad(1, ("optim.batch_size=many",), r"error: optim\.batch_size: expected an integer, got 'many'"),
    "K not dividing": Bad(1, ("fed.K=5",), r"error: fed\.K: epochs x steps_per_epoch = 12 is not a whole number "
                                          r"of rounds of K=5"),
    "milestone off a round boundary": Bad(1, ("optim.epochs=2", "optim.steps_per_epoch=6", "fed.K=4",
                                              "optim.milestones=[1]"),
                                          r"error: optim\.milestones\[0\]: epoch 1 ends at step 6, not on a round "
                                          r"boundary of K=4 .*"),
    "missing config file": Bad(1, ("--config", "{base}/nowhere.yaml"),
                               r"error: --config: no such file .*nowhere\.yaml"),
    "config not YAML": Bad(1, ("--config", "{base}/bad.yaml"), r"error: .*bad\.yaml: not valid YAML .*"),
    "config not UTF-8": Bad(WORLD, ("--config", "{base}/latin1.yaml"),
                            r"error: .*latin1\.yaml: not UTF-8 text \(byte 0xe9 at offset \d+\); save the file as "
                            r"UTF-8", prepare=_latin1_config),
    "log.dir under a file": Bad(WORLD, ("log.dir={base}/a-file/runs",),
                                r"error: log\.dir: cannot create the run folder .*a-file/runs/victim \(Not a "
                                r"directory\)", prepare=_file_in_the_way),
    "log.dir in /proc": Bad(WORLD, ("log.dir=/proc/fedmpi-runs",),
                            r"error: log\.dir: cannot create the run folder /proc/fedmpi-runs/victim \(.*\)"),
    "keep no checkpoint": Bad(1, ("checkpoint.keep=0",), r"error: checkpoint\.keep: must be >= 1, got 0"),
    "collective timeout of 0": Bad(1, ("run.collective_timeout_s=0",),
                                   r"error: run\.collective_timeout_s: must be >= 10 s .*got 0\.0"),
    "world size mismatch": Bad(1, (), r"error: world size: this layout needs 4 MPI ranks \(1 server \+ a 2 \+ "
                                      r"b 1\), but the job has 1; launch with mpirun -n 4 .*"),
    "missing rec path": Bad(WORLD, ("log.name=other", "parties.b.data.kind=rec",
                                    "parties.b.data.path={base}/nowhere"),
                            r"error: parties\.b\.data\.path: .*nowhere/train\.rec not found \(a rec set is a "
                            r"folder holding train\.rec and train\.idx, .*\)"),   # refused before torch
    "corrupt rec": Bad(WORLD, ("log.name=other", "parties.b.data.kind=rec", "parties.b.data.path={target}"),
                       r"rank 0 \(server\): DataError: .*train\.rec record 2: index offset 99999 is past the "
                       r"end of the file .*", prepare=lambda run: _corrupt_rec(run.base), accepted=True),
    "existing log without --resume": Bad(WORLD, (), r"error: log\.name: .*log\.h5 already exists; choose "
                                                    r"another log\.name, or continue that run with --resume auto .*"),
    "--resume without log.name": Bad(WORLD, ("log.name=''", "--resume", "auto"),
                                     r"error: --resume needs log\.name: .*"),
    "--resume with an empty value": Bad(WORLD, ("--resume", ""), r"error: --resume: give auto or a checkpoint "
                                                                 r"folder .*"),
    "--resume from a missing path": Bad(WORLD, ("--resume", "{ckpt}/round_000009"),
                                        r"error: .*round_000009: no such checkpoint folder"),
    "--resume with another batch per step": Bad(3, ("parties.a.ranks=1", "--resume", "auto"),
                                                r"error: --resume: .*round_000006 was written with another batch "
                                                r"per step \(party a: 2 x 4 = 8 images per step \(ranks x batch "
                                                r"per rank\), this run 1 x 4 = 4\); keep the party's batch per step "
                                                r"\(parties\.NAME\.batch_size\), or add --allow-config-changes .*"),
    "--resume with another algorithm": Bad(WORLD, ("fed.algorithm=fedavg", "--resume", "auto"),
                                           r"error: --resume: .*round_000006 was written by a run with "
                                           r"fed\.algorithm 'pfm', this run has fed\.algorithm 'fedavg'; .*"),
    "--resume past the last round": Bad(WORLD, ("optim.steps_per_epoch=4", "--resume", "auto"),
                                        r"error: --resume: .*round_000006 is after round 6, but this config has "
                                        r"only 2 rounds"),
    "--resume auto after a finished run without checkpoints": Bad(
        WORLD, ("--resume", "auto"), r"error: --resume auto: no complete checkpoint in .*, and .*log\.h5 holds the "
                                     r"finished run \(6/6 rounds\); nothing to resume, the log was left as it is .*",
        lambda run: shutil.rmtree(run.ckpt), own_copy=True),
    "--resume with another lr and seed": Bad(
        WORLD, ("optim.lr=0.2", "run.seed=5", "--resume", "auto"),
        r"error: --resume: this run changes what .*round_000006 was computed with \(optim\.lr 0\.1 -> 0\.2, run\.seed "
        r"0 -> 5\); resume with the same values, or add --allow-config-changes to continue with the new ones .*"),
    "--resume from a truncated part": Bad(WORLD, ("--resume", "{target}"),
                                          r"error: .*round_000006: part party-a-1\.h5 has \d+ bytes, the manifest "
                                          r"says \d+ \(truncated or rewritten\)", _truncate_part, own_copy=True),
    "--resume from a checkpoint without manifest": Bad(WORLD, ("--resume", "{target}"),
                                                       r"error: .*round_000006: no manifest\.json .*",
                                                       _drop_manifest, own_copy=True),
    "--resume from a garbled manifest": Bad(WORLD, ("--resume", "{target}"),
                                            r"error: .*round_000006/manifest\.json: not valid JSON",
                                            _garble_manifest, own_copy=True),
}


@pytest.fixture(scope="module")
def victim(reference, tmp_path_factory):
    """A copy of the reference run that every bad launch below aims at."""
    run = copy_run(reference, tmp_path_factory.mktemp("victim"), "victim")
    (run.base / "bad.yaml").write_text(BAD_YAML)
    return run


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_ends_with_a_one_line_error_and_changes_nothing(case, victim, tmp_path):
    bad = BAD_INPUTS[case]
    run = copy_run(victim, tmp_path, "victim") if bad.own_copy else victim
    target = bad.prepare(run) if bad.prepare else None
    before = snapshot(run.folder)
    args = run.args(*[a.format(base=run.base, ckpt=run.ckpt, target=target) for a in bad.args])
    launcher = [] if bad.ranks == 1 else [mpirun_binary(), "--oversubscribe", "--bind-to", "none", "-n",
                                          str(bad.ranks)]
    result = subprocess.run([*launcher, sys.executable, "-X", "importtime", *args], capture_output=True, text=True,
                            timeout=BAD_INPUT_TIMEOUT_S, env=mpi_env(), cwd=str(ROOT))
    assert result.returncode != 0, result.stdout + result.stderr
    ours = error_lines(result.stderr)
    assert ours and re.fullmatch(bad.error, ours[0]), result.stderr
    assert len({line.partition(": ")[2] for line in ours}) == 1, ours   # one error, however many ranks say it
    assert "Traceback" not in result.stderr
    assert snapshot(run.folder) == before
    # a refused launch ends before any rank imports torch (~2.4 s of CPU per rank): -X importtime lists each import
    assert bool(re.search(r"\|\s+torch$", result.stderr, re.M)) == bad.accepted


# ---------------------------------------------------------------- a start that fails leaves nothing behind


def _refused_pickle(base):
    folder = base / "crafted-bins"
    folder.mkdir(exist_ok=True)
    (folder / "lfw.bin").write_bytes(pickle.dumps(os.getcwd))   # a global no pair set holds
    return folder


FAILED_STARTS = {  # before the server opens its log, and after
    "missing .bin folder": (lambda base: base / "no-bins", r"error: data\.val_path: .*no-bins/lfw\.bin not found "
                                                          r"\(data\.val_sets names lfw; .*\)"),   # before the folder
    "refused pickle": (_refused_pickle, r"rank 0 \(server\): DataError: .*lfw\.bin: refused pickle global "
                                        r"posix\.getcwd.*"),
}


@pytest.mark.parametrize("case", list(FAILED_STARTS))
def test_a_failed_start_removes_the_run_folder_it_created(case, reference, tmp_path):
    run = sibling_run(reference, tmp_path, "fails")
    folder, error = FAILED_STARTS[case]
    result = run.launch("data.val_kind=bin", f"data.val_path={folder(run.base)}", timeout=BAD_INPUT_TIMEOUT_S * 2)
    assert result.returncode != 0
    assert re.fullmatch(error, error_lines(result.stderr)[0]), result.stderr
    assert not run.folder.exists(), sorted(run.folder.rglob("*"))
