"""The templates and membership audits on known answers: planted class rows re-identified through the senders'
and labels' numbering of a recording (a party's row i, a client's row j), a row filed under another owner not;
PrivacyFace cones counting the identities inside them and their sender's; the AUC the (ε, δ)-DP bound permits;
the ε read beside the AUC it permits; what a report says of defences that cover the backbone only; and the
recorder writing the class payloads the server held, nothing where a method uploads none."""
import math
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
import torch

from fedmpi.audit import membership_audit
from fedmpi.audit.gallery import Gallery
from fedmpi.audit.membership_audit import accounted, auc_bound
from fedmpi.audit.run_view import Refused
from fedmpi.audit.template_audit import check_attackable, clusters_result, lines, rows_result
from fedmpi.core.received import ReceivedRecorder
from fedmpi.core.seams import NoClasses
from fedmpi.silo.server_classes import senders

# two parties: party 0 holds identities 0..2, party 1 identities 3..4; each identity 3 images around its centre
CENTRES = torch.nn.functional.normalize(torch.randn(5, 32, generator=torch.Generator().manual_seed(0)), dim=1)


def gallery(spread=0.05) -> Gallery:
    noise = spread * torch.randn(15, 32, generator=torch.Generator().manual_seed(1))
    return Gallery(CENTRES.repeat_interleave(3, dim=0) + noise, np.repeat(np.arange(5), 3), np.array([0, 3]),
                   np.array([3, 2]))


def test_planted_rows_are_reidentified_as_their_owners():
    received = {"class_rows": CENTRES[[4, 0, 2]] + 0.01, "class_row_sender": torch.tensor([1, 0, 0]),
                "class_row_label": torch.tensor([1, 0, 2])}
    found = rows_result(received, gallery(), threshold=0.5)
    assert found["rows"] == 3 and found["senders"] == 2 and found["gallery"] == 5
    assert found["top1"] == 1.0 and found["at_threshold"] == 1.0 and found["chance"] == 0.2
    assert found["ranks"] == [1, 1, 1]
    filed_elsewhere = {**received, "class_row_label": torch.tensor([0, 0, 2])}   # row of identity 4 filed as 3
    assert rows_result(filed_elsewhere, gallery(), threshold=0.5)["top1"] == pytest.approx(2 / 3)


def test_a_round_whose_rows_were_all_left_out_is_refused():
    empty = SimpleNamespace(round=3, received={"class_rows": torch.zeros(0, 4), "algorithm": "fedaws"})
    with pytest.raises(Refused, match="^round 3 holds no class_rows: the server stored none of them"):
        check_attackable(empty)


def test_a_cone_counts_the_identities_inside_it_and_its_senders():
    # [p | α | released]: a cone of κ = cos α = 0.99 around identity 3 holds it alone; an empty slot is skipped
    alpha = math.acos(0.99)
    clusters = torch.stack([torch.cat([CENTRES[3], torch.tensor([alpha, 1.0])]),
                            torch.cat([CENTRES[3], torch.tensor([alpha, 1.0])]),
                            torch.cat([CENTRES[3], torch.tensor([alpha, 0.0])])])
    found = clusters_result(clusters, np.array([1, 0, 0]), gallery(spread=0.0))
    assert found["clusters"] == 2 and found["inside"] == [1, 1] and found["own_inside"] == [1, 0]
    assert found["with_own"] == 0.5 and found["senders"] == 2
    wide = clusters.clone()
    wide[:, 32] = math.pi          # κ = −1: every identity inside
    assert clusters_result(wide, np.array([1, 0, 0]), gallery())["inside"] == [5, 5]


def test_the_auc_the_dp_bound_permits():
    # δ = 0: the bound's area is e^ε / (1 + e^ε); ε = 0 leaves chance; δ = 0.2 at ε = 0: ∫ min(x + 0.2, 1) dx
    assert auc_bound(math.log(3), 0.0) == pytest.approx(0.75, abs=1e-6)
    assert auc_bound(0.0, 0.0) == pytest.approx(0.5, abs=1e-6)
    assert auc_bound(0.0, 0.2) == pytest.approx(0.68, abs=1e-6)


def view(dp: bool, algorithm: str):
    fed = SimpleNamespace(dp=SimpleNamespace(enabled=dp, delta=0.0), algorithm=algorithm)
    return SimpleNamespace(cfg=SimpleNamespace(fed=fed), run=None, round=2)


def test_the_accounted_epsilon_is_read_beside_the_auc_it_permits(monkeypatch):
    read = []
    monkeypatch.setattr(membership_audit, "log_row", lambda run, table, r: read.append((table, r)) or
                        {"epsilon": math.log(3), "delta": 0.0})
    assert accounted(view(True, "fedavg"))["auc_bound"] == pytest.approx(0.75, abs=1e-6)
    found = accounted(view(False, "privacyface"))
    assert found["epsilon"] == math.log(3) and "Θ itself is not noised" in found["by"]
    assert read == [("privacy", 2), ("classes", 2)] and accounted(view(False, "fedaws")) == {}


def test_a_defence_of_the_backbone_is_not_said_to_cover_the_class_rows():
    result = {"setting": "face clients, fedavg", "gallery": 16, "model": "Θ after the round", "secure": False,
              "dp": True, "kind": "rows", "rows": 8, "senders": 8, "top1": 1.0, "far": 0.01, "at_threshold": 1.0,
              "threshold": 0.9, "chance": 0.0625}
    assert "(the backbone was noised by DP; the class payloads were not)" in lines(result)[0]
    assert "the class payloads were not" not in lines({**result, "dp": False})[0]


class Exchange:
    rows, upload_names, gives_uploads = None, ["a", "b"], False


class Rows(NoClasses):
    def recorded(self):
        return {"class_rows": torch.arange(10.0).reshape(5, 2), **senders([3, 2])}


def test_the_recorder_writes_the_class_payloads_the_server_held(tmp_path):
    recorder = ReceivedRecorder(tmp_path, [1, 2], {"numel": 3})
    for r, classes in ((0, Rows()), (1, NoClasses())):
        recorder.before_step(r, torch.zeros(3), Exchange(), classes)
        recorder.after_step(r, torch.ones(3))
    with h5py.File(tmp_path / "received" / "round-1.h5") as f:
        assert f["class_rows"][:].tolist() == torch.arange(10.0).reshape(5, 2).tolist()
        assert f["class_row_sender"][:].tolist() == [0, 0, 0, 1, 1]
        assert f["class_row_label"][:].tolist() == [0, 1, 2, 0, 1]
    with h5py.File(tmp_path / "received" / "round-2.h5") as f:
        assert sorted(f) == ["theta_after", "theta_before"]
