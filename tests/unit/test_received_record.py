"""log.record_received: the server writes what it held in a recorded round (Θ before and after its step, each
upload where the exchange keeps them) and nothing in the other rounds; a round outside the run is refused."""
from types import SimpleNamespace

import h5py
import pytest
import torch

from fedmpi.config import ConfigError, load_config
from fedmpi.core.received import ReceivedRecorder, round_file


def test_a_recorded_round_holds_theta_before_and_after_and_each_upload(tmp_path):
    recorder = ReceivedRecorder(tmp_path, [2], {"numel": 3})
    exchange = SimpleNamespace(rows=torch.tensor([[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]]), upload_names=["a", "b"],
                               gives_uploads=True)
    theta = torch.zeros(3)
    for r in range(3):
        recorder.before_step(r, theta, exchange)
        theta += 1.0
        recorder.after_step(r, theta)
    assert sorted(p.name for p in (tmp_path / "received").iterdir()) == ["round-2.h5"]
    with h5py.File(round_file(tmp_path, 2)) as f:
        assert f["theta_before"][:].tolist() == [1.0] * 3 and f["theta_after"][:].tolist() == [2.0] * 3
        assert f["uploads"][:].tolist() == [[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]]
        assert f.attrs["round"] == 2 and not f.attrs["secure"] and f.attrs["numel"] == 3
        assert list(f.attrs["upload_names"]) == ["a", "b"]


def test_under_secure_aggregation_no_upload_is_recorded(tmp_path):
    recorder = ReceivedRecorder(tmp_path, [1], {})
    recorder.before_step(0, torch.zeros(2), SimpleNamespace(rows=None, upload_names=["a", "b"], gives_uploads=False))
    recorder.after_step(0, torch.ones(2))
    with h5py.File(round_file(tmp_path, 1)) as f:
        assert "uploads" not in f and f.attrs["secure"]


def test_a_round_outside_the_run_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^log.record_received\[1\]: must be a round from 1 to \d+, got 9999$"):
        load_config("configs/demo_cpu.yaml", ["log.record_received=[1, 9999]"])
    assert load_config("configs/demo_cpu.yaml", ["log.record_received=[2]"]).log.record_received == [2]
