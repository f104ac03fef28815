"""IResNet: insightface layout (parameter counts, state_dict names), input size and width knobs, errors."""
import pytest
import torch

from fedmpi.models import iresnet
from fedmpi.models.iresnet import STAGE_BLOCKS

# insightface arcface_torch iresnet{18,34,50,100}(), 112x112 input, 512-d embedding
INSIGHTFACE_PARAMETERS = {"ir18": 24_025_600, "ir34": 34_139_328, "ir50": 43_590_848, "ir100": 65_156_160}


def architecture_parameter_count(blocks, channels=(64, 128, 256, 512), spatial=7, embedding=512):
    """Count from the layer layout: stem, IBasicBlocks (+ 1x1 shortcut in each stage's first), bn2/fc/features."""
    bn = lambda c: 2 * c  # noqa: E731 (weight, bias)
    total = 3 * 9 * channels[0] + bn(channels[0]) + channels[0]  # conv1, bn1, prelu
    inputs = channels[0]
    for c, count in zip(channels, blocks):
        for index in range(count):
            total += bn(inputs) + 9 * inputs * c + bn(c) + c + 9 * c * c + bn(c)
            if index == 0:
                total += inputs * c + bn(c)
            inputs = c
    return total + bn(inputs) + inputs * spatial * spatial * embedding + embedding + bn(embedding)


def _on_meta(name, **kwargs):
    with torch.device("meta"):
        return iresnet(name, **kwargs)


@pytest.mark.parametrize("name", list(STAGE_BLOCKS))
def test_parameter_counts_match_insightface(name):
    model = _on_meta(name)
    total = sum(p.numel() for p in model.parameters())
    assert total == INSIGHTFACE_PARAMETERS[name] == architecture_parameter_count(STAGE_BLOCKS[name])
    # the embedding BN's scale is frozen at 1, as in insightface
    assert total - sum(p.numel() for p in model.parameters() if p.requires_grad) == 512


@pytest.mark.parametrize("name, key_count, last_block", [("ir18", 187, "layer4.1"), ("ir50", 475, "layer4.2")])
def test_state_dict_keys_are_insightface_names(name, key_count, last_block):
    keys = list(_on_meta(name).state_dict())
    assert len(keys) == key_count
    assert keys[:9] == ["conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
                        "bn1.num_batches_tracked", "prelu.weight", "layer1.0.bn1.weight", "layer1.0.bn1.bias"]
    for key in ["layer1.0.conv1.weight", "layer1.0.bn2.running_var", "layer1.0.prelu.weight",
                "layer1.0.conv2.weight", "layer1.0.bn3.weight", "layer1.0.downsample.0.weight",
                "layer1.0.downsample.1.running_mean", "layer2.0.downsample.0.weight",
                "layer3.1.conv2.weight", f"{last_block}.bn3.bias"]:
        assert key in keys, key
    assert "layer1.1.downsample.0.weight" not in keys
    assert keys[-12:] == ["bn2.weight", "bn2.bias", "bn2.running_mean", "bn2.running_var",
                          "bn2.num_batches_tracked", "fc.weight", "fc.bias", "features.weight", "features.bias",
                          "features.running_mean", "features.running_var", "features.num_batches_tracked"]


def test_ir50_layer_shapes_and_bn_settings():
    model = _on_meta("ir50")
    state = model.state_dict()
    assert state["conv1.weight"].shape == (64, 3, 3, 3)
    assert state["layer1.0.conv2.weight"].shape == (64, 64, 3, 3)
    assert state["layer2.0.downsample.0.weight"].shape == (128, 64, 1, 1)
    assert state["layer3.13.conv1.weight"].shape == (256, 256, 3, 3)
    assert state["fc.weight"].shape == (512, 512 * 7 * 7)
    assert model.layer2[0].conv2.stride == (2, 2) and model.layer2[0].conv1.stride == (1, 1)
    assert all(m.eps == 1e-5 for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm))


def test_small_width_and_input_size_forward():
    torch.manual_seed(0)
    model = iresnet("ir18", input_size=32, width=0.25)
    assert model.layer1[0].conv1.weight.shape == (16, 16, 3, 3)
    assert model.fc.in_features == 128 * 2 * 2
    assert model(torch.randn(3, 3, 32, 32)).shape == (3, 512)
    tiny = iresnet("ir50", embedding_size=64, input_size=16, width=0.125, dropout=0.2)
    assert tiny(torch.randn(2, 3, 16, 16)).shape == (2, 64)
    assert torch.equal(tiny.features.weight, torch.ones(64)) and not tiny.features.weight.requires_grad


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="unknown backbone 'ir152'"):
        iresnet("ir152")
    with pytest.raises(ValueError, match="input_size 100 must be a positive multiple of 16"):
        iresnet("ir18", input_size=100)
    with pytest.raises(ValueError, match="width 0 must be > 0"):
        iresnet("ir18", width=0)
    model = iresnet("ir18", input_size=16, width=0.125)
    with pytest.raises(ValueError, match="built for 16x16 input, got \\(32, 32\\)"):
        model(torch.randn(2, 3, 32, 32))
