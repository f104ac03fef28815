"""model.init: a pretrained start from an insightface-layout state_dict, round-tripped with tools.export bit for
bit; a file that does not fit the configured backbone refused in one line naming the first key and both shapes;
the public classifier (model.init_classifier) in tools.export --classifier's layout."""
from __future__ import annotations

import pytest
import torch

from fedmpi.config import load_config
from fedmpi.core.build import build_parts
from fedmpi.core.state import BackboneState
from fedmpi.models.backbone import build_backbone
from fedmpi.models.pretrained import InitError, describe_initial_model, file_sha256, read_public_classifier
from tools.export import export_state_dict

SMALL = ["model.width=0.125", "model.embedding_size=16", "data.image_size=32", "fed.algorithm=fedavg"]
CPU = torch.device("cpu")


def trained_backbone(cfg):
    """A backbone whose every value (BatchNorm statistics included) differs from a fresh one's."""
    backbone = build_backbone(cfg, CPU, torch.float32, seed=11)
    state = BackboneState(backbone)
    state.write(torch.randn(state.numel, generator=torch.Generator().manual_seed(3)).abs() + 0.5)
    return backbone, state


def test_a_run_starts_from_an_exported_backbone_bit_for_bit(tmp_path):
    backbone, state = trained_backbone(load_config(None, SMALL))
    export_state_dict(backbone, tmp_path / "model.pth")
    cfg = load_config(None, [*SMALL, "run.seed=5", f"model.init={tmp_path / 'model.pth'}"])
    parts = build_parts(cfg, CPU, torch.float32)
    assert torch.equal(parts.state.read(), state.read())
    assert not torch.equal(build_parts(load_config(None, [*SMALL, "run.seed=5"]), CPU, torch.float32).state.read(),
                           state.read())
    described = describe_initial_model(cfg, None)
    assert described == {"backbone": {"path": str(tmp_path / "model.pth"), "sha256": file_sha256(tmp_path / "model.pth")}}


def test_a_file_of_another_backbone_is_refused_naming_the_first_key_and_both_shapes(tmp_path):
    backbone, _ = trained_backbone(load_config(None, SMALL))
    export_state_dict(backbone, tmp_path / "model.pth")
    cfg = load_config(None, [*SMALL, "model.width=0.25", f"model.init={tmp_path / 'model.pth'}"])
    with pytest.raises(InitError) as refused:
        describe_initial_model(cfg, None)
    assert str(refused.value) == (f"model.init: {tmp_path / 'model.pth'}: conv1.weight is [8, 3, 3, 3] in the file, "
                                  "[16, 3, 3, 3] in the configured backbone (model.backbone, model.width, "
                                  "model.embedding_size, data.image_size)")
    state = backbone.state_dict()
    del state["layer1.0.bn1.weight"]
    torch.save(state, tmp_path / "partial.pth")
    with pytest.raises(InitError, match=r"partial.pth: no layer1.0.bn1.weight \(the configured backbone's is \[8\]\)$"):
        describe_initial_model(load_config(None, [*SMALL, f"model.init={tmp_path / 'partial.pth'}"]), None)
    torch.save({**backbone.state_dict(), "head.weight": torch.zeros(1)}, tmp_path / "extra.pth")
    with pytest.raises(InitError, match="extra.pth: head.weight is not a key of the configured backbone$"):
        describe_initial_model(load_config(None, [*SMALL, f"model.init={tmp_path / 'extra.pth'}"]), None)
    (tmp_path / "text.pth").write_text("not a model")
    with pytest.raises(InitError, match="text.pth cannot be read as a torch state_dict"):
        describe_initial_model(load_config(None, [*SMALL, f"model.init={tmp_path / 'text.pth'}"]), None)


def test_the_public_classifier_is_read_in_the_export_layout_and_its_shape_checked(tmp_path):
    weight = torch.randn(7, 16, dtype=torch.float32)
    torch.save({"weight": weight}, tmp_path / "fc.pt")
    assert torch.equal(read_public_classifier(tmp_path / "fc.pt", 7, 16), weight.to(torch.float64))
    with pytest.raises(InitError, match=r"weight is \[7, 16\], the public set's 9 identities x model.embedding_size "
                                        r"16 need \[9, 16\]$"):
        read_public_classifier(tmp_path / "fc.pt", 9, 16)
