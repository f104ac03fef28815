"""Checkpoints: the stored values round-trip exactly, only complete checkpoints are resumed from, old ones are
pruned, and a run stopped by a preemption signal and resumed ends bitwise equal to the uninterrupted run."""
from __future__ import annotations

import io
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

import h5py
import numpy as np
import pytest
import torch

from fedmpi.config import to_yaml
from fedmpi.store import checkpoint as ck
from fedmpi.store.h5log import LogReader, RunLog
from mpi_scripts.ckpt_common import ROUNDS, assert_same_run, copy_run, reference_run, rounds_logged, sibling_run


# ---------------------------------------------------------------- values, RNGs, optimizer state


def test_every_kind_of_value_round_trips_exactly(tmp_path):
    pcg_state = np.random.default_rng(7).bit_generator.state  # 128-bit integers inside
    value = {
        "theta": torch.randn(1000, dtype=torch.float32),
        "f64": torch.randn(3, 4, dtype=torch.float64),
        "scalar": torch.tensor(3, dtype=torch.int64),
        "bf16": torch.randn(5).to(torch.bfloat16),
        "empty": torch.zeros(0),
        "array": np.arange(6, dtype=np.uint32).reshape(2, 3),
        "blob": b"\x00\x01binary\xff",
        "text": "ir18:\n  width: 0.125\n",
        "plain": [1, 2.5, None, True, "x", [3, 4]],
        "state": {0: {"momentum_buffer": torch.ones(2)}, 1: {"momentum_buffer": None}},
        "groups": [{"lr": 0.1, "params": [0, 1], "nesterov": False}],
        "numpy_rng": np.random.get_state(),
        "pcg": pcg_state,
        "nan": float("nan"),
        "empty_dict": {},
    }
    part = ck.write_part(tmp_path, "p.h5", value, {"round": 3, "step": 6}, rank=0)
    assert not list(tmp_path.glob(".*tmp*")) and part.size == (tmp_path / "p.h5").stat().st_size
    back = ck.read_part(tmp_path / "p.h5")
    assert back["_attrs"]["round"] == 3 and back["_attrs"]["format"] == ck.FORMAT
    for key in ("theta", "f64", "scalar", "bf16", "empty"):
        assert back[key].dtype == value[key].dtype and torch.equal(back[key], value[key]), key
    assert back["array"].dtype == np.uint32 and np.array_equal(back["array"], value["array"])
    assert back["blob"] == value["blob"] and back["text"] == value["text"] and back["plain"] == value["plain"]
    assert torch.equal(back["state"][0]["momentum_buffer"], torch.ones(2)) and back["state"][1] == {
        "momentum_buffer": None}
    assert back["groups"] == value["groups"] and back["pcg"] == pcg_state and back["empty_dict"] == {}
    assert isinstance(back["numpy_rng"], tuple) and np.array_equal(back["numpy_rng"][1], value["numpy_rng"][1])
    assert back["nan"] != back["nan"]


def test_rng_states_restore_the_same_draws(tmp_path):
    torch.manual_seed(1), np.random.seed(2), random.seed(3)
    random.gauss(0, 1)  # leaves a cached gauss_next in Python's state
    ck.write_part(tmp_path, "rng.h5", {"rng": ck.capture_rng()}, {}, rank=0)
    first = (torch.rand(5), np.random.rand(5), [random.random() for _ in range(5)], random.gauss(0, 1))
    ck.restore_rng(ck.read_part(tmp_path / "rng.h5")["rng"])
    again = (torch.rand(5), np.random.rand(5), [random.random() for _ in range(5)], random.gauss(0, 1))
    assert torch.equal(first[0], again[0]) and np.array_equal(first[1], again[1])
    assert first[2:] == again[2:]


def test_optimizer_state_resumes_the_same_steps(tmp_path):
    def model_and_opt():
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)

    def step(model, opt, i):
        opt.zero_grad()
        model(torch.full((2, 4), float(i))).square().sum().backward()
        opt.step()

    model, opt = model_and_opt()
    for i in range(3):
        step(model, opt, i)
    ck.write_part(tmp_path, "o.h5", {"model": model.state_dict(), "opt": opt.state_dict()}, {}, rank=0)
    for i in range(3, 5):
        step(model, opt, i)
    resumed, resumed_opt = model_and_opt()
    saved = ck.read_part(tmp_path / "o.h5")
    resumed.load_state_dict(saved["model"])
    resumed_opt.load_state_dict(saved["opt"])
    for i in range(3, 5):
        step(resumed, resumed_opt, i)
    for a, b in zip(model.parameters(), resumed.parameters()):
        assert torch.equal(a, b)


def test_deterministic_kernels_sets_torchs_flag():
    from fedmpi.store.rng import deterministic_kernels

    was = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(False)
        deterministic_kernels()
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(was)


def test_copy_into_names_a_shape_mismatch():
    with pytest.raises(ck.ResumeError, match=r"algorithm/global_momentum is torch.float32 \[3\], this run has "
                                             r"torch.float32 \[4\]"):
        ck.copy_into({"global_momentum": torch.zeros(4)}, {"global_momentum": torch.zeros(3)}, "algorithm")


# ---------------------------------------------------------------- which checkpoint is complete


def fake_checkpoint(directory, rounds_done: int, manifest: bool = True):
    folder = directory / ck.round_folder_name(rounds_done)
    folder.mkdir(parents=True)
    parts = [ck.write_part(folder, ck.SERVER_PART, {"theta": torch.full((64,), float(rounds_done))}, {}, 0),
             ck.write_part(folder, ck.party_part("a", 0), {"x": torch.arange(32.0)}, {}, 1)]
    if manifest:
        ck.write_manifest(folder, rounds_done, 2 * rounds_done, parts, {"signature": {}})
    return folder


def test_resume_auto_never_picks_an_incomplete_or_damaged_checkpoint(tmp_path):
    fake_checkpoint(tmp_path, 2)
    fake_checkpoint(tmp_path, 4, manifest=False)                 # stopped before the manifest
    truncated = fake_checkpoint(tmp_path, 6)
    with open(truncated / ck.party_part("a", 0), "r+b") as f:
        f.truncate(100)
    rewritten = fake_checkpoint(tmp_path, 8)                     # same size, other bytes
    data = bytearray((rewritten / ck.SERVER_PART).read_bytes())
    data[-1] ^= 0xFF
    (rewritten / ck.SERVER_PART).write_bytes(bytes(data))
    gone = fake_checkpoint(tmp_path, 10)
    (gone / ck.party_part("a", 0)).unlink()
    (tmp_path / "round_000012").mkdir()                          # an empty folder

    skipped = []
    assert ck.latest_complete(tmp_path, skipped.append) == tmp_path / "round_000002"
    assert len(skipped) == 5
    assert "round_000010: part party-a-0.h5 is missing" in skipped[1]
    assert "server.h5 does not match the sha256" in skipped[2]
    assert "party-a-0.h5 has 100 bytes, the manifest says" in skipped[3]
    assert "round_000004: no manifest.json" in skipped[4]
    with pytest.raises(ck.ResumeError, match="party-a-0.h5 has 100 bytes.*truncated"):
        ck.resolve_checkpoint(truncated)
    assert ck.resolve_checkpoint(tmp_path) == tmp_path / "round_000002"   # a ckpt folder: its newest complete


def test_pruning_keeps_the_newest_complete_checkpoints(tmp_path):
    for r in (1, 2, 3, 5):
        fake_checkpoint(tmp_path, r)
    fake_checkpoint(tmp_path, 4, manifest=False)   # older than the newest complete: a leftover
    fake_checkpoint(tmp_path, 6, manifest=False)   # newer: may be in the making
    removed = ck.prune(tmp_path, keep=2)
    assert sorted(p.name for p in removed) == ["round_000001", "round_000002", "round_000004"]
    assert [r for r, _ in ck.list_checkpoints(tmp_path)] == [3, 5, 6]


def test_a_log_left_open_by_a_killed_server_is_released_for_the_resumed_run(tmp_path):
    path = tmp_path / "log.h5"
    code = (f"from fedmpi.store.h5log import RunLog\nimport os\n"
            f"log = RunLog({str(path)!r}, config_yaml='x: 1', algorithm='pfm', run_name='r', parties=['a'])\n"
            f"for r in range(4):\n"
            f"    log.append('rounds', round=r, step=r, lr=0.1, wall_time=1.0, round_time=1.0, images_per_s=1.0,"
            f" bytes_moved=1, bytes_up=1, bytes_down=0, bytes_intra=0, fv_iterations=0, loss=[float(r)],"
            f" party_images_per_s=[1.0], update_norm=[1.0], uploads_excluded=[0])\n"
            f"os._exit(0)\n")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    with pytest.raises(OSError):
        h5py.File(path, "r+", libver="latest")
    with LogReader(path) as log:                         # readable as it is
        assert list(log.table("rounds")["round"]) == [0, 1, 2, 3]
    ck.release_log(path)
    log = RunLog(path, config_yaml="x: 1", algorithm="pfm", run_name="r", parties=["a"], resume_round=2)
    log.close()
    with LogReader(path) as log:
        assert list(log.table("rounds")["round"]) == [0, 1] and log.config_yaml == "x: 1"


# ---------------------------------------------------------------- stop and resume, with MPI


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return reference_run(tmp_path_factory)


def test_the_uninterrupted_run_checkpoints_every_3_rounds(reference):
    assert [r for r, _ in ck.list_checkpoints(reference.ckpt)] == [3, 6]
    manifest = ck.check_complete(reference.ckpt / "round_000003")
    assert sorted(manifest["parts"]) == ["party-a-0.h5", "party-a-1.h5", "party-b-0.h5", "server.h5"]
    assert manifest["round"] == 3 and manifest["step"] == 6
    assert manifest["signature"]["topology"] == "1 server + a + b"             # rank counts may change
    assert manifest["topology"]["parties"] == {"a": 2, "b": 1} and manifest["party_batches"] == {"a": 8, "b": 4}
    a0 = ck.read_part(reference.ckpt / "round_000003" / "party-a-0.h5")
    a1 = ck.read_part(reference.ckpt / "round_000003" / "party-a-1.h5")
    assert "algorithm" in a0 and "algorithm" not in a1            # the rule's state: once per party
    assert a0["classifier"]["weight"].shape[0] + a1["classifier"]["weight"].shape[0] == 8  # two shards
    final = torch.load(reference.base / "final.pt", weights_only=True)["theta"]
    assert torch.equal(final, ck.read_part(reference.ckpt / "round_000006" / "server.h5")["theta"])


def test_deterministic_ranks_load_neither_torch_dynamo_nor_dp_accounting(reference):
    """run.deterministic sets torch's kernel flag without torch.use_deterministic_algorithms' import of
    torch._inductor (torch._dynamo: 1.4 s of CPU per rank), and a server without fed.dp leaves dp_accounting
    (scipy, absl: 1.3 s) unloaded."""
    from bench.rank_probe import read_records

    records = read_records(reference.base / "probe")
    assert sorted(records) == [0, 1, 2, 3]
    for rank, record in records.items():
        assert "torch" in record["loaded"] and "h5py" in record["loaded"], record["loaded"]
        assert not {"torch._dynamo", "torch._inductor", "sympy", "dp_accounting", "scipy"} & set(record["loaded"]), \
            (rank, record["loaded"])


def test_stopped_by_sigterm_on_one_rank_after_round_3_and_resumed_equals_the_uninterrupted_run(reference,
                                                                                              tmp_path):
    run = sibling_run(reference, tmp_path, "stopped")
    stopped = run.launch_signalled(rank=2, round_=3, signal="TERM")   # the second rank of party a
    assert stopped.returncode == 75, stopped.stdout + stopped.stderr
    assert "preempted (SIGTERM): stopped after round 3/6" in stopped.stdout
    assert [r for r, _ in ck.list_checkpoints(run.ckpt)] == [3]
    ck.check_complete(run.ckpt / "round_000003")
    assert rounds_logged(run) == [0, 1, 2]

    resumed = run.launch("--resume", "auto")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "round 4/6" in resumed.stdout and "round 3/6" not in resumed.stdout
    assert_same_run(reference, run)


def test_sigusr1_sent_to_mpirun_checkpoints_exits_75_and_resuming_from_that_folder_finishes_identically(
        reference, tmp_path):
    run = sibling_run(reference, tmp_path, "preempted")
    process = run.popen()
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 180
        while not any(line.startswith("round 1/6") for line in lines):  # a round is done: notice, as Slurm would
            assert process.poll() is None, "the run ended before its first round:\n" + "".join(lines)
            assert time.monotonic() < deadline, "no round within 180 s:\n" + "".join(lines)
            time.sleep(0.05)
        process.send_signal(signal.SIGUSR1)
        process.wait(timeout=120)
    finally:
        process.kill()
        reader.join(timeout=10)
    text = "".join(lines)
    assert process.returncode == 75, text
    stopped_at = max(rounds_logged(run)) + 1
    assert 1 <= stopped_at < ROUNDS and f"preempted (SIGUSR1): stopped after round {stopped_at}/6" in text
    folder = run.ckpt / ck.round_folder_name(stopped_at)
    assert [r for r, _ in ck.list_checkpoints(run.ckpt)][-1] == stopped_at
    ck.check_complete(folder)

    resumed = run.launch("--resume", str(folder))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert_same_run(reference, run)


# ---------------------------------------------------------------- the collective step, on one process


class OneRank:
    """The communicator the Checkpointer is given, for a world of one."""

    def Get_rank(self):
        return 0

    def Get_size(self):
        return 1


def checkpointer(tmp_path, every=2, keep=2, rounds=6, signal=""):
    from fedmpi.config import load_config
    from fedmpi.layout import build_layout

    cfg = load_config(None, ["parties=[{name: a, ranks: 1}]", f"checkpoint.every={every}",
                             f"checkpoint.keep={keep}", "fed.K=2", f"optim.steps_per_epoch={2 * rounds}",
                             "optim.epochs=1", "optim.milestones=[]"])
    return ck.Checkpointer(OneRank(), tmp_path, cfg, build_layout(cfg), lambda comm: signal, stream=io.StringIO())


def test_checkpoints_are_due_every_n_rounds_after_the_last_and_when_preempted(tmp_path):
    def parts():
        return {ck.SERVER_PART: {"theta": torch.zeros(3)}}

    saver = checkpointer(tmp_path / "a", every=4, keep=5)
    assert [saver.round_end(r, parts) for r in range(1, 7)] == [False] * 6
    assert [r for r, _ in ck.list_checkpoints(tmp_path / "a")] == [4, 6]
    stopper = checkpointer(tmp_path / "b", every=0, signal="SIGUSR1")
    assert stopper.round_end(2, parts) is True
    assert "preempted (SIGUSR1): stopped after round 2/6" in stopper.stream.getvalue()
    assert stopper.round_end(6, parts) is False   # a notice in the last round: the run is complete anyway
    assert [r for r, _ in ck.list_checkpoints(tmp_path / "b")] == [2]


def test_rewriting_a_checkpoint_first_withdraws_its_manifest_and_leftovers(tmp_path, monkeypatch):
    from fedmpi import comm

    saver = checkpointer(tmp_path)
    folder = saver.save(2, {ck.SERVER_PART: {"theta": torch.zeros(3)}})
    (folder / ".party-a-0.h5.tmp-999").write_bytes(b"left by a rank that died while writing")
    seen = {}

    def bcast_noting_the_folder(value, **how):  # the go-ahead for every rank to write its parts
        seen["manifest"] = (folder / ck.MANIFEST).exists()
        seen["leftovers"] = [p.name for p in folder.glob(".*")]
        return value

    monkeypatch.setattr(comm, "bcast", bcast_noting_the_folder)
    saver.save(2, {ck.SERVER_PART: {"theta": torch.ones(3)}})
    assert seen == {"manifest": False, "leftovers": []}
    assert sorted(p.name for p in folder.iterdir()) == [ck.MANIFEST, ck.SERVER_PART]
    assert torch.equal(ck.read_part(folder / ck.SERVER_PART)["theta"], torch.ones(3))
    ck.check_complete(folder)


def test_resume_auto_without_a_checkpoint_starts_fresh_and_a_path_is_checked(tmp_path, capsys):
    from fedmpi.config import load_config
    from fedmpi.layout import build_layout

    cfg = load_config(None, ["parties=[{name: a, ranks: 1}]", "fed.K=2", "optim.steps_per_epoch=12",
                             "optim.epochs=1", "optim.milestones=[]"])
    layout = build_layout(cfg)
    assert ck.find_resume_point("auto", cfg, layout, tmp_path) is None
    assert "--resume auto: no complete checkpoint in" in capsys.readouterr().err
    assert ck.find_resume_point(None, cfg, layout, tmp_path) is None
    saver = ck.Checkpointer(OneRank(), tmp_path / "ckpt", cfg, layout, lambda comm: "", stream=io.StringIO())
    saver.save(3, {ck.SERVER_PART: {"theta": torch.zeros(3), "config": to_yaml(cfg)}})
    point = ck.find_resume_point(str(tmp_path / "ckpt" / "round_000003"), cfg, layout, tmp_path)
    assert (point.folder.name, point.round, point.step) == ("round_000003", 3, 6)
    assert ck.find_resume_point("auto", cfg, layout, tmp_path) == point


# ---------------------------------------------------------------- lineage: rewinds, restarts, the earlier log


def small_run(rounds=6, *extra):
    from fedmpi.config import load_config
    from fedmpi.layout import build_layout

    cfg = load_config(None, ["parties=[{name: a, ranks: 1}]", "fed.K=2", f"optim.steps_per_epoch={2 * rounds}",
                             "optim.epochs=1", "optim.milestones=[]", *extra])
    return cfg, build_layout(cfg)


def log_with_rounds(path, n):
    log = RunLog(path, config_yaml="x: 1", algorithm="pfm", run_name="r", parties=["a"])
    for r in range(n):
        log.append("rounds", round=r, step=2 * (r + 1), lr=0.1, wall_time=1.0, round_time=1.0, images_per_s=1.0,
                   bytes_moved=1, bytes_up=1, bytes_down=0, bytes_intra=0, fv_iterations=0, loss=[float(r)],
                   party_images_per_s=[1.0], update_norm=[1.0], uploads_excluded=[0])
    log.close()


def test_a_rewind_sets_the_abandoned_future_aside_and_auto_then_continues_the_new_history(tmp_path, capsys):
    cfg, layout = small_run(20, "checkpoint.every=2", "checkpoint.keep=3")
    first = ck.Checkpointer(OneRank(), tmp_path / "ckpt", cfg, layout, lambda comm: "", stream=io.StringIO())
    for r in (2, 18, 20):
        first.save(r, {ck.SERVER_PART: {"theta": torch.full((3,), float(r)), "config": to_yaml(cfg)}})
    log_with_rounds(tmp_path / "log.h5", 20)
    cfg, layout = small_run(20, "checkpoint.every=2", "checkpoint.keep=1")   # the rewind keeps fewer
    saver = ck.Checkpointer(OneRank(), tmp_path / "ckpt", cfg, layout, lambda comm: "", stream=io.StringIO())
    point = ck.find_resume_point(str(tmp_path / "ckpt" / "round_000002"), cfg, layout, tmp_path)
    assert point.round == 2 and point.changes == {}           # checkpoint.keep may change freely
    aside = tmp_path / "ckpt" / "abandoned-1"
    assert sorted(p.name for p in aside.iterdir()) == ["round_000018", "round_000020"]
    assert "moved to" in capsys.readouterr().err
    with LogReader(tmp_path / "log.abandoned-1.h5") as log:            # the abandoned rounds stay readable
        assert len(log.table("rounds")["round"]) == 20
    folder = saver.save(4, {ck.SERVER_PART: {"theta": torch.zeros(3), "config": to_yaml(cfg)}})  # with keep=1
    assert folder.is_dir() and [r for r, _ in ck.list_checkpoints(tmp_path / "ckpt")] == [4]
    assert ck.find_resume_point("auto", cfg, layout, tmp_path).folder == folder


def test_resume_auto_without_a_checkpoint_keeps_the_earlier_log_and_refuses_after_a_finished_run(tmp_path, capsys):
    cfg, layout = small_run(6)
    log_with_rounds(tmp_path / "log.h5", 4)
    assert ck.find_resume_point("auto", cfg, layout, tmp_path) is None
    assert not (tmp_path / "log.h5").exists()
    with LogReader(tmp_path / "log.attempt-1.h5") as log:
        assert list(log.table("rounds")["round"]) == [0, 1, 2, 3]
    assert "the earlier attempt's log (4 rounds) kept as" in capsys.readouterr().err

    log_with_rounds(tmp_path / "log.h5", 6)
    before = (tmp_path / "log.h5").read_bytes()
    with pytest.raises(ck.ResumeError, match=r"--resume auto: no complete checkpoint in .*, and .*log\.h5 holds "
                                             r"the finished run \(6/6 rounds\); nothing to resume"):
        ck.find_resume_point("auto", cfg, layout, tmp_path)
    assert (tmp_path / "log.h5").read_bytes() == before


def test_a_truncated_log_is_refused_at_once_and_set_aside_by_resume_auto(tmp_path, capsys):
    cfg, layout = small_run(6)
    log_with_rounds(tmp_path / "log.h5", 4)
    whole = (tmp_path / "log.h5").read_bytes()
    (tmp_path / "log.h5").write_bytes(whole[:4096])     # a rank killed before HDF5 wrote the file out
    code = ("import sys\nfrom fedmpi.store.h5log import LogReader, LogSchemaError\ntry:\n    LogReader(sys.argv[1])\n"
            "except LogSchemaError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "log.h5")], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()})   # SWMR mode retried for minutes
    assert re.search(r"log\.h5: not a readable fedmpi log \(.*truncated file", out.stdout), out.stdout + out.stderr
    assert ck.find_resume_point("auto", cfg, layout, tmp_path) is None
    assert (tmp_path / "log.attempt-1.h5").read_bytes() == whole[:4096]
    assert "the earlier attempt's log (unreadable rounds) kept as" in capsys.readouterr().err


def test_a_new_log_takes_its_name_at_its_first_row(tmp_path):
    path = tmp_path / "log.h5"
    log = RunLog(path, config_yaml="x: 1", algorithm="pfm", run_name="r", parties=["a"])
    assert not path.exists()                          # a start that fails here leaves no log.h5
    log_rows = dict(round=0, step=2, lr=0.1, wall_time=1.0, round_time=1.0, images_per_s=1.0, bytes_moved=1,
                    bytes_up=1, bytes_down=0, bytes_intra=0, fv_iterations=0, loss=[0.5], party_images_per_s=[1.0],
                    update_norm=[1.0], uploads_excluded=[0])
    log.append("rounds", **log_rows)
    assert path.exists() and not list(tmp_path.glob(".*"))
    log.close()
    with LogReader(path) as reader:
        assert list(reader.table("rounds")["loss"][:, 0]) == [0.5]


def test_a_resumed_log_of_an_earlier_fedmpi_gets_the_columns_it_lacks(tmp_path):
    """A log written before the upload check's columns existed: a resume adds them, NaN (0 excluded) for the rounds
    it already holds, and the next rows have them."""
    path = tmp_path / "log.h5"
    log_with_rounds(path, 3)
    with h5py.File(path, "r+") as f:
        del f["rounds/update_norm"], f["rounds/uploads_excluded"]
    log = RunLog(path, config_yaml="x: 1", algorithm="pfm", run_name="r", parties=["a"], resume_round=2)
    log.append("rounds", round=2, step=6, lr=0.1, wall_time=1.0, round_time=1.0, images_per_s=1.0, bytes_moved=1,
               bytes_up=1, bytes_down=0, bytes_intra=0, fv_iterations=0, loss=[2.0], party_images_per_s=[1.0],
               update_norm=[4.5], uploads_excluded=[1])
    log.close()
    with LogReader(path) as reader:
        rounds = reader.table("rounds")
    assert list(rounds["round"]) == [0, 1, 2] and list(rounds["loss"][:, 0]) == [0.0, 1.0, 2.0]
    np.testing.assert_array_equal(rounds["update_norm"][:, 0], [np.nan, np.nan, 4.5])
    assert list(rounds["uploads_excluded"][:, 0]) == [0, 0, 1]


def test_a_resume_that_changes_the_lr_is_refused_unless_allowed(tmp_path):
    cfg, layout = small_run(6)
    saver = ck.Checkpointer(OneRank(), tmp_path / "ckpt", cfg, layout, lambda comm: "", stream=io.StringIO())
    saver.save(2, {ck.SERVER_PART: {"theta": torch.zeros(3), "config": to_yaml(cfg)}})
    changed, _ = small_run(6, "optim.lr=0.05", "data.workers=3")          # workers: free to change
    with pytest.raises(ck.ResumeError, match=r"this run changes what .*round_000002 was computed with \(optim\.lr "
                                             r"0\.1 -> 0\.05\); .* add --allow-config-changes"):
        ck.find_resume_point("auto", changed, layout, tmp_path)
    point = ck.find_resume_point("auto", changed, layout, tmp_path, allow_changes=True)
    assert point.changes == {"optim.lr": [0.1, 0.05]}


CLIENTS = ["clients.rounds=6", "clients.population=10", "clients.images=10", "clients.train_images=100",
           "clients.test_images=10"]


@pytest.mark.parametrize("change, listed", [("clients.alpha=0", r"clients\.alpha 1\.0 -> 0\.0"),
                                            ("clients.partition_seed=3", r"clients\.partition_seed 0 -> 3")],
                         ids=["alpha", "partition_seed"])
def test_a_resume_on_another_client_partition_is_refused_unless_allowed(tmp_path, change, listed):
    """Hsu's label skew alpha and the partition seed decide which images each virtual client holds."""
    from fedmpi.config import load_config
    from fedmpi.layout import build_layout

    cfg = load_config("configs/hsu_cifar10.yaml", CLIENTS)
    saver = ck.Checkpointer(OneRank(), tmp_path / "ckpt", cfg, build_layout(cfg), lambda comm: "",
                            stream=io.StringIO())
    saver.save(2, {ck.SERVER_PART: {"theta": torch.zeros(3), "config": to_yaml(cfg)}})
    changed = load_config("configs/hsu_cifar10.yaml", [*CLIENTS, change])
    with pytest.raises(ck.ResumeError, match=rf"this run changes what .*round_000002 was computed with \({listed}\); "
                                             r".* add --allow-config-changes"):
        ck.find_resume_point("auto", changed, build_layout(changed), tmp_path)
    point = ck.find_resume_point("auto", changed, build_layout(changed), tmp_path, allow_changes=True)
    assert list(point.changes) == [change.split("=")[0]] and point.round == 2


# ---------------------------------------------------------------- checkpoints of earlier versions


def old_layout(tree: dict) -> dict:
    """A server part in the earlier layout: the side work's state and the exchange's (the
    cross-device sampler) both under "validation", w always present."""
    old = {key: value for key, value in tree.items() if key not in ("side_work", "exchange", "_attrs")}
    exchange = tree["exchange"]
    old["validation"] = {"fv": None, "sampler": exchange} if exchange else tree["side_work"]
    return old


def test_a_checkpoint_in_the_earlier_layout_resumes_the_same(reference, tmp_path):
    from fedmpi.store.upgrade import upgrade_server_part

    run = copy_run(reference, tmp_path, "old-layout", drop_after=3)
    folder = run.ckpt / "round_000003"
    saved = ck.read_part(folder / ck.SERVER_PART)
    assert saved["side_work"] == {"fv": None} and saved["exchange"] == {}       # today's names
    attrs = {k: v for k, v in saved["_attrs"].items() if k not in ("format", "version")}
    part = ck.write_part(folder, ck.SERVER_PART, old_layout(saved), attrs, rank=0)
    manifest = ck.read_manifest(folder)
    manifest["parts"][ck.SERVER_PART].update(size=part.size, sha256=part.sha256)
    (folder / ck.MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    assert "validation" in ck.read_part(folder / ck.SERVER_PART) and ck.check_complete(folder)

    resumed = run.launch("--resume", str(folder))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "round 4/6" in resumed.stdout and "round 3/6" not in resumed.stdout
    assert_same_run(reference, run)

    # the other shapes of the old entry: FV's search with its θ' snapshot, and the cross-device sampler
    search, latest, sampler = {"w": [0.5, 0.5]}, torch.ones(2, 3), {"sampler": {"state": 1}, "clients": {}}
    fv = upgrade_server_part({"theta": 1, "w": 2, "validation": {"fv": search, "latest": latest}})
    assert fv == {"theta": 1, "w": 2, "side_work": {"fv": search, "latest": latest}, "exchange": {}}
    clients = upgrade_server_part({"theta": 1, "w": 2, "validation": {"fv": None, "sampler": sampler}})
    assert clients == {"theta": 1, "w": 2, "side_work": {}, "exchange": sampler}
    assert upgrade_server_part(fv) is fv
