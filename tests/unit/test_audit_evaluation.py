"""The model that scores a reconstruction's identity (fedmpi/audit/evaluation.py) did not train on the
participants' data: --evaluation-model's file where named, else the run's model.init, else Θ before round 1 (the
run's start); past round 1 with neither, refused in one line naming the option; a file of another backbone is
refused naming its first mismatching key."""
from types import SimpleNamespace

import pytest
import torch

from fedmpi.audit.evaluation import evaluation_model
from fedmpi.audit.run_view import Refused, embed
from fedmpi.core.state import BackboneState
from fedmpi.models.backbone import build_backbone

IMAGES = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)) * 2 - 1


def cfg(init=None, width=0.25, seed=0):
    return SimpleNamespace(model=SimpleNamespace(backbone="ir18", embedding_size=16, width=width, dropout=0.0,
                                                 init=init),
                           data=SimpleNamespace(image_size=32), run=SimpleNamespace(seed=seed))


def backbone(config):
    return build_backbone(config, torch.device("cpu"), torch.float32)


def saved(tmp_path, name: str, seed: int, width=0.25):
    """A state_dict of the backbone built from `seed` (a model no participant trained), and its embeddings."""
    model = backbone(cfg(seed=seed, width=width))
    path = tmp_path / name
    torch.save(model.state_dict(), path)
    return str(path), embed(model, IMAGES)


def view(config, round_number: int):
    theta = BackboneState(backbone(config)).read()        # Θ before the round: the seed-0 backbone
    return SimpleNamespace(cfg=config, round=round_number, received={"theta_before": theta})


def scored_by(evaluation) -> torch.Tensor:
    return embed(evaluation.model, IMAGES.to(evaluation.dtype))


def test_the_named_model_scores_identity_over_the_runs_start(tmp_path):
    start, start_embeddings = saved(tmp_path, "start.pth", 1)
    other, other_embeddings = saved(tmp_path, "other.pth", 2)
    named = evaluation_model(view(cfg(init=start), 3), SimpleNamespace(evaluation_model=other))
    assert torch.equal(scored_by(named), other_embeddings) and named.words == f"{other} (--evaluation-model)"
    default = evaluation_model(view(cfg(init=start), 3), SimpleNamespace(evaluation_model=None))
    assert torch.equal(scored_by(default), start_embeddings)
    assert default.words == f"the run's pretrained start {start} (model.init)"


def test_without_a_start_file_round_1_is_scored_by_theta_before_it():
    config = cfg()
    evaluation = evaluation_model(view(config, 1), SimpleNamespace())
    assert torch.equal(scored_by(evaluation), embed(backbone(config), IMAGES))
    assert evaluation.words.startswith("Θ before round 1: the run's start (no model.init")


def test_past_round_1_without_a_start_file_is_refused_naming_the_option():
    with pytest.raises(Refused) as refusal:
        evaluation_model(view(cfg(), 2), SimpleNamespace(evaluation_model=None))
    assert str(refusal.value) == (
        "round 2: Θ before it trained on the participants' data and the run has no model.init to score identity "
        "with: name an independent model by --evaluation-model PATH (a state_dict of the run's backbone, as "
        "python -m tools.export writes)")


def test_a_model_of_another_backbone_is_refused_naming_its_first_mismatch(tmp_path):
    wide, _ = saved(tmp_path, "wide.pth", 1, width=0.5)
    with pytest.raises(Refused) as refusal:
        evaluation_model(view(cfg(), 1), SimpleNamespace(evaluation_model=wide))
    assert str(refusal.value) == (f"--evaluation-model {wide}: conv1.weight is [32, 3, 3, 3] in the file, "
                                  f"[16, 3, 3, 3] in the configured backbone (model.backbone, model.width, "
                                  f"model.embedding_size, data.image_size)")
    with pytest.raises(Refused, match=r"^--evaluation-model: no such file /nowhere.pth$"):
        evaluation_model(view(cfg(), 1), SimpleNamespace(evaluation_model="/nowhere.pth"))
