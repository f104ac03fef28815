"""Membership in the silo (fedmpi/audit/heldout.py, membership_audit.py): the held-out identities the study writes
(data/sets.py, prepare_heldout_identities) are the party's generator and prior drawn at indices the party does
not hold, so other people (their identity keys differ from every key of the party); read back by fedmpi's RecordIO
reader they score AUC near 0.5 against the party's identities under a model that saw neither (the null test); a
folder that is not RecordIO, or that holds a party's identity, is refused in one line."""
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedmpi.audit.heldout import read_folder, shared_identities
from fedmpi.audit.membership import membership_attack
from fedmpi.audit.run_view import Refused
from fedmpi.data.sets import prepare_heldout_identities, prepare_training_set
from fedmpi.data.synthetic import identity_keys

IDENTITIES, IMAGES, SIZE = 150, 2, 16


def folders(tmp_path):
    data = SimpleNamespace(root=str(tmp_path), image_size=SIZE, seed=0)
    spec = SimpleNamespace(kind="synthetic", style="ga", identities=IDENTITIES, images_per_identity=IMAGES)
    cfg = SimpleNamespace(data=data)
    return cfg, prepare_training_set(spec, data), prepare_heldout_identities(spec, data, first=IDENTITIES)


def test_the_heldout_identities_are_the_styles_next_people_not_the_partys(tmp_path):
    cfg, party, heldout = folders(tmp_path)
    mine, theirs = read_folder(cfg, party), read_folder(cfg, heldout)
    assert list(theirs.identity_ids) == list(identity_keys("ga", IDENTITIES, 0, first=IDENTITIES))
    assert list(mine.identity_ids) + list(theirs.identity_ids) == list(identity_keys("ga", 2 * IDENTITIES, 0))
    assert not set(mine.identity_ids) & set(theirs.identity_ids) and len(theirs) == IDENTITIES * IMAGES
    shared_identities(theirs, {"p0": mine.identity_ids})       # no refusal: no party holds them
    with pytest.raises(Refused, match=rf"^--nonmembers {party}: {IDENTITIES} of its identities are party p0's "
                                      r"\(identity id [0-9a-f]+\): non-members must be identities no party trained "
                                      r"on$"):
        shared_identities(mine, {"p0": mine.identity_ids})


def test_a_model_that_saw_neither_scores_membership_at_chance(tmp_path):
    cfg, party, heldout = folders(tmp_path)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * SIZE * SIZE, 16))
    embedded, identities = [], []
    for offset, folder in ((0, party), (IDENTITIES, heldout)):
        dataset = read_folder(cfg, folder)
        with torch.no_grad():
            embedded.append(model(torch.stack([dataset[i][0] for i in range(len(dataset))])))
        identities.append(dataset.labels + offset)
    found = membership_attack(torch.cat(embedded), np.concatenate(identities), range(IDENTITIES))
    assert found["members"] == found["nonmembers"] == IDENTITIES
    assert abs(found["auc"] - 0.5) < 0.1, found["auc"]


def test_a_folder_that_is_not_recordio_is_refused_in_one_line(tmp_path):
    cfg = SimpleNamespace(data=SimpleNamespace(image_size=SIZE))
    with pytest.raises(Refused) as refusal:
        read_folder(cfg, Path(tmp_path))
    assert str(refusal.value) == (f"--nonmembers {tmp_path}: no train.rec (a folder of held-out identities in "
                                  f"RecordIO, train.rec and train.idx, as a party's data.kind=rec)")


def test_a_device_runs_nonmembers_are_its_clients_never_sampled_not_a_folder():
    from fedmpi.audit import membership_audit

    view = SimpleNamespace(cfg=SimpleNamespace(cross_device=True))
    with pytest.raises(Refused) as refusal:
        membership_audit.run(view, SimpleNamespace(nonmembers=["held-out"]))
    assert str(refusal.value) == ("--nonmembers: a cross-device run's non-members are its face clients never "
                                  "sampled; the option serves a silo run")
