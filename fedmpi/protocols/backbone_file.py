"""A backbone to evaluate from a file: a fedmpi checkpoint (or run / ckpt folder: its newest complete
checkpoint), or an insightface-layout state_dict (.pth, e.g. from tools.export) whose architecture is read
off its tensor shapes (stage depths, width, embedding size, input size)."""
from __future__ import annotations

import math
import re
from pathlib import Path

import torch

from fedmpi.config import config_from_yaml
from fedmpi.models.iresnet import STAGE_BLOCKS, STAGE_CHANNELS, iresnet
from fedmpi.store.checkpoint import SERVER_PART, read_part, resolve_checkpoint


class BackboneFileError(ValueError):
    pass


def architecture_of(state: dict, where: str) -> dict:
    """{'name', 'width', 'embedding_size', 'input_size'} of an IResNet state_dict."""
    try:
        depths = tuple(1 + max(int(m.group(1)) for k in state if (m := re.match(rf"layer{s}\.(\d+)\.", k)))
                       for s in range(1, 5))
        stem, last, fc = state["conv1.weight"], state["bn2.weight"], state["fc.weight"]
    except (KeyError, ValueError):
        raise BackboneFileError(f"{where}: not an IResNet state_dict (insightface key names expected)") from None
    names = [n for n, blocks in STAGE_BLOCKS.items() if blocks == depths]
    if not names:
        raise BackboneFileError(f"{where}: stage depths {depths} match no IResNet ({', '.join(STAGE_BLOCKS)})")
    spatial = math.isqrt(fc.shape[1] // last.shape[0])
    return {"name": names[0], "width": stem.shape[0] / STAGE_CHANNELS[0], "embedding_size": fc.shape[0],
            "input_size": 16 * spatial}


def load_global_backbone(checkpoint: str | Path) -> tuple[torch.nn.Module, object, Path]:
    """(backbone holding Θ in float32, eval mode; the run's config; the checkpoint folder used)."""
    from fedmpi.core.state import BackboneState
    from fedmpi.models.backbone import build_backbone

    folder = resolve_checkpoint(Path(checkpoint))
    saved = read_part(folder / SERVER_PART, ("theta", "config"))
    cfg = config_from_yaml(saved["config"], where=f"{folder / SERVER_PART}: config")
    backbone = build_backbone(cfg, torch.device("cpu"), torch.float32)
    state = BackboneState(backbone)
    theta = saved["theta"]
    if theta.numel() != state.numel:
        raise BackboneFileError(f"{folder / SERVER_PART}: theta has {theta.numel()} values, the {cfg.model.backbone} "
                          f"of its config has {state.numel}")
    state.write(theta.to(torch.float32))
    return backbone.eval(), cfg, folder


def load_backbone(path) -> tuple[torch.nn.Module, int, str]:
    """(backbone in eval mode, float32 on the CPU; its input size; a one-line description)."""
    path = Path(path)
    if not path.exists():
        raise BackboneFileError(f"{path}: no such checkpoint, run folder or .pth file")
    if path.is_dir():
        backbone, cfg, folder = load_global_backbone(path)
        return backbone, cfg.data.image_size, f"{folder} ({cfg.model.backbone}, width {cfg.model.width})"
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user error
        raise BackboneFileError(f"{path}: cannot read as a torch state_dict ({type(exc).__name__})") from None
    if not isinstance(state, dict):
        raise BackboneFileError(f"{path}: holds a {type(state).__name__}, not a state_dict")
    arch = architecture_of(state, str(path))
    width = arch["width"]
    backbone = iresnet(arch["name"], arch["embedding_size"], arch["input_size"], width)
    try:
        backbone.load_state_dict({k: v.float() for k, v in state.items()})
    except RuntimeError as exc:
        raise BackboneFileError(f"{path}: {str(exc).splitlines()[0]}") from None
    return backbone.eval(), arch["input_size"], f"{path} ({arch['name']}, width {width:g})"
