"""TensorBoard events (fedmpi/store/tensorboard.py): what the server writes as a run goes and what
`fedmpi-tensorboard` writes from a finished log, read back with tensorboard's own reader (EventAccumulator) and
compared with the HDF5 log value by value (at float32, TensorBoard's scalar type). The live runs are the session's
shared launch (tests/support/shared_runs.py): FedFace with FV and held-out evaluation, and DP-FedAvg with its ε."""
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedmpi.analysis import tensorboard as converter
from fedmpi.store.h5log import LogReader, RunLog
from fedmpi.store.tensorboard import EventWriter, row_scalars, row_step
from shared_runs import declare
from test_analysis import REAL_RUN
from test_dp import LOUD

FEDFACE = declare("fedface", [*REAL_RUN, "fv.enabled=true", "fv.iterations_per_round=1"])   # test_analysis's run
ROOT = Path(__file__).resolve().parents[2]


def read_events(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def logged_scalars(path: Path) -> dict[str, list[tuple[int, float]]]:
    """What the events should hold: every curve of every row table of the log, each value as float32."""
    expected: dict[str, list[tuple[int, float]]] = {}
    with LogReader(path) as log:
        for table, columns in converter.tables(log).items():
            for i in range(len(columns["round"])):
                row = {name: values[i] for name, values in columns.items()}
                for tag, value in row_scalars(table, row, log.parties):
                    expected.setdefault(tag, []).append((row_step(table, i, row), float(np.float32(value))))
    return expected


def assert_same(read: dict, expected: dict) -> None:
    assert sorted(read) == sorted(expected)
    for tag, points in expected.items():
        got = read[tag]
        assert [s for s, _ in got] == [s for s, _ in points], tag
        for (step, value), (_, want) in zip(got, points):
            assert value == want or (math.isnan(value) and math.isnan(want)), (tag, step, value, want)


def test_a_row_maps_to_named_scalars():
    row = {"round": 2, "step": 30, "lr": 0.1, "loss": np.array([1.5, 2.5]), "bytes_up": 10,
           "candidates": np.zeros((4, 2)), "w": np.array([0.25, 0.75, 0.0])}
    assert row_scalars("rounds", row, ["a", "b"]) == [("rounds/lr", 0.1), ("rounds/loss/a", 1.5),
                                                      ("rounds/loss/b", 2.5), ("rounds/bytes_up", 10.0)]
    assert row_step("rounds", 7, row) == 3          # the round, from 1
    assert row_step("fv", 7, row) == 8              # the FV iteration, from 1
    assert row_scalars("clients", {"round": 0, "ids": np.array([4, 9])}, ["a", "b"]) == []


def write_a_log(path: Path, mirror_folder: Path | None) -> None:
    """A log as the server writes one: rounds, FV iterations, evaluations and ε, with a live mirror."""
    log = RunLog(path, config_yaml="{}", algorithm="pfm", run_name="t", parties=["a", "b"], val_sets=["lfw"],
                 fv_candidates=3, extra_tables={"privacy": {"round": ((), "i8"), "epsilon": ((), "f8")}})
    if mirror_folder is not None:
        log.mirror = EventWriter(mirror_folder, ["a", "b"])
    for r in range(3):
        log.append("rounds", round=r, step=5 * (r + 1), lr=0.1 / (r + 1), wall_time=2.0 * r, round_time=2.0,
                   images_per_s=100.0 + r, bytes_moved=3 * 2**40, bytes_up=2**40, bytes_down=2**41, bytes_intra=0,
                   fv_iterations=1, loss=[3.0 - r, 4.0 - r / 3], party_images_per_s=[50.0, 50.0 + r],
                   update_norm=[2.0 + r, 1e6], uploads_excluded=[0, 1])
        log.append("fv", round=r, iteration=0, candidates=np.full((3, 2), 0.5), raw_scores=np.zeros((3, 1)),
                   norm_scores=np.zeros((3, 1)), chosen=r % 3, w=[0.5 + r / 10, 0.5 - r / 10])
        log.append("privacy", round=r, epsilon=1.5 * (r + 1))
    log.append("eval", round=2, step=15, **{"lfw/accuracy": 0.75, "lfw/accuracy_std": 0.05,
                                            "lfw/tar_far_1e-3": float("nan"), "lfw/tar_far_1e-2": 0.5})
    log.close()


def test_the_live_mirror_and_the_converter_write_what_the_log_holds(tmp_path):
    write_a_log(tmp_path / "run" / "log.h5", tmp_path / "run")
    expected = logged_scalars(tmp_path / "run" / "log.h5")
    for tag in ("rounds/loss/a", "rounds/lr", "rounds/images_per_s", "rounds/bytes_up", "rounds/bytes_down",
                "rounds/bytes_intra", "rounds/round_time", "fv/w/b", "eval/lfw/accuracy", "privacy/epsilon",
                "rounds/update_norm/a", "rounds/uploads_excluded/b"):
        assert tag in expected
    assert expected["rounds/update_norm/b"] == [(1, 1e6), (2, 1e6), (3, 1e6)]   # a party drifting, round by round
    assert expected["rounds/loss/b"] == [(1, 4.0), (2, float(np.float32(4 - 1 / 3))), (3, float(np.float32(4 - 2 / 3)))]
    assert_same(read_events(tmp_path / "run"), expected)

    assert converter.main([str(tmp_path / "run"), "--out", str(tmp_path / "tb")]) is None
    assert_same(read_events(tmp_path / "tb" / "run"), expected)
    converter.main([str(tmp_path / "run")])          # next to the log: replaces the live file, no second copy
    assert len(list((tmp_path / "run").glob("events.out.tfevents.*"))) == 1
    assert_same(read_events(tmp_path / "run"), expected)


def test_each_row_is_in_the_event_file_before_the_run_ends(tmp_path):
    """TensorBoard shows a run as it goes: the mirror flushes every row (the log stays open here)."""
    log = RunLog(tmp_path / "log.h5", config_yaml="{}", algorithm="fedavg", run_name="t", parties=["a"])
    log.mirror = EventWriter(tmp_path, ["a"])
    try:
        log.append("rounds", round=0, step=5, lr=0.1, wall_time=1.0, round_time=1.0, images_per_s=10.0,
                   bytes_moved=0, bytes_up=0, bytes_down=0, bytes_intra=0, fv_iterations=0, loss=[2.5],
                   party_images_per_s=[10.0], update_norm=[3.0], uploads_excluded=[0])
        assert read_events(tmp_path)["rounds/loss/a"] == [(1, 2.5)]
    finally:
        log.close()


def test_no_event_file_is_made_before_the_first_row(tmp_path):
    """A start that fails before its first round removes the run folder it made: the mirror must not have left a
    file there (the log itself takes its name at its first row)."""
    writer = EventWriter(tmp_path, ["a"])
    writer.row("rounds", 0, {"round": 0})          # a row without curves writes nothing either
    writer.close()
    assert list(tmp_path.iterdir()) == []


def test_the_converter_refuses_what_is_not_a_log(tmp_path, capsys):
    (tmp_path / "log.h5").write_text("not hdf5")
    assert converter.cli(converter.main, [str(tmp_path)]) == 2
    assert "not a readable fedmpi log" in capsys.readouterr().err


@pytest.mark.parametrize("name", [FEDFACE, LOUD])
def test_a_live_run_writes_its_log_as_tensorboard_events(shared_runs, name):
    run = shared_runs[name]
    with LogReader(run / "log.h5") as log:
        assert "tensorboard: true" in log.config_yaml, "log.tensorboard resolved off: is tensorboard installed?"
    expected = logged_scalars(run / "log.h5")
    assert ("fv/w/ms1m" in expected and "eval/lfw/accuracy" in expected) if name == FEDFACE \
        else "privacy/epsilon" in expected
    assert len(expected["rounds/lr"]) >= 1
    assert_same(read_events(run), expected)


def test_config_refuses_tensorboard_without_the_package(monkeypatch):
    import importlib.util

    from fedmpi.config import ConfigError, load_config

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    assert load_config(None, []).log.tensorboard is False            # empty: off without the package
    with pytest.raises(ConfigError, match=r"log.tensorboard: the tensorboard package is not installed"):
        load_config(None, ["log.tensorboard=true"])


def test_only_the_server_imports_tensorboard():
    """The config, the log and the rule registry do not import tensorboard; making a writer does."""
    code = ("import sys; import fedmpi.config, fedmpi.store.h5log, fedmpi.store.tensorboard; "
            "assert not [m for m in sys.modules if m.startswith('tensorboard')], 'imported'; "
            "from fedmpi.config import load_config; assert load_config(None, []).log.tensorboard is True; "
            "assert not [m for m in sys.modules if m.startswith('tensorboard')], 'imported by the config'")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
