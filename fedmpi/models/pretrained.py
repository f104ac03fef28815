"""A run's starting model from files (`model.init`, `model.init_classifier`): a pretrained start, as federated face
recognition since FedFR (Liu et al. 2022) fine-tunes a publicly trained model across many small parties.

`model.init` is an IResNet state_dict in insightface's layout and key names: what `python -m tools.export` writes,
or a released insightface backbone (`backbone.pth` of arcface_torch). It must fit the configured backbone key for
key and shape; the first key that does not is named in one line (`InitError`), with both shapes.
`model.init_classifier` is a classifier of the public identities (`data.public`) as `tools.export --classifier`
writes one (arcface_torch's PartialFC layout, `{"weight": [classes, d]}`), or a bare [classes, d] tensor.
The run log keeps each file's path and sha256 (/data attrs `model.init`)."""
from __future__ import annotations

import hashlib
from pathlib import Path

import torch


class InitError(ValueError):
    """A starting-model file that cannot start this run; the message is one line naming the file."""


def file_sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_tensors(path, key: str):
    """What torch.save wrote in `path` (tensors only: weights_only); InitError naming `key` and the file."""
    path = Path(path)
    if not path.is_file():
        raise InitError(f"{key}: no such file {path}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user error
        raise InitError(f"{key}: {path} cannot be read as a torch state_dict ({type(exc).__name__})") from None


def _shape(t) -> str:
    return f"[{', '.join(str(s) for s in t.shape)}]"


def check_state_dict(state, model: torch.nn.Module, where: str) -> None:
    """InitError naming the first of the model's keys (in its order) that the file lacks or holds in another shape,
    else the first key of the file the model does not have."""
    if not isinstance(state, dict):
        raise InitError(f"{where}: holds a {type(state).__name__}, not a state_dict")
    expected = model.state_dict()
    for key, value in expected.items():
        if key not in state:
            raise InitError(f"{where}: no {key} (the configured backbone's is {_shape(value)})")
        if not isinstance(state[key], torch.Tensor) or tuple(state[key].shape) != tuple(value.shape):
            found = _shape(state[key]) if isinstance(state[key], torch.Tensor) else type(state[key]).__name__
            raise InitError(f"{where}: {key} is {found} in the file, {_shape(value)} in the configured backbone "
                            f"(model.backbone, model.width, model.embedding_size, data.image_size)")
    for key in state:
        if key not in expected:
            raise InitError(f"{where}: {key} is not a key of the configured backbone")


def load_initial_backbone(model: torch.nn.Module, path, key: str = "model.init", where: str | None = None) -> None:
    """Copy the state_dict in `path` into `model` (its dtype and device kept), after check_state_dict; `key` names
    the setting or option that gave `path`, `where` the file in an error (default "KEY: PATH")."""
    state = read_tensors(path, key)
    check_state_dict(state, model, where or f"{key}: {path}")
    with torch.no_grad():
        for key, target in model.state_dict().items():
            target.copy_(state[key])


def read_public_classifier(path, classes: int, embedding_size: int) -> torch.Tensor:
    """The public identities' class centres [classes, embedding_size] in `path` (float64, CPU): a PartialFC
    state_dict {"weight": ...} or a bare tensor; InitError when its shape is another."""
    saved = read_tensors(path, "model.init_classifier")
    weight = saved.get("weight") if isinstance(saved, dict) else saved
    where = f"model.init_classifier: {path}"
    if not isinstance(weight, torch.Tensor):
        raise InitError(f"{where}: holds no 'weight' tensor (the layout of tools.export --classifier)")
    if tuple(weight.shape) != (classes, embedding_size):
        raise InitError(f"{where}: weight is {_shape(weight)}, the public set's {classes} identities x "
                        f"model.embedding_size {embedding_size} need [{classes}, {embedding_size}]")
    return weight.to(torch.float64)


def describe_initial_model(cfg, public_classes: int | None) -> dict:
    """Checks the files against the configured model (InitError, one line) and describes them for the run log:
    {"backbone": {path, sha256}, "classifier": {path, sha256}} for the files set ({} when none is)."""
    from fedmpi.models.iresnet import iresnet

    m, out = cfg.model, {}
    if m.init:
        probe = iresnet(m.backbone, m.embedding_size, cfg.data.image_size, m.width, m.dropout)
        check_state_dict(read_tensors(m.init, "model.init"), probe, f"model.init: {m.init}")
        out["backbone"] = {"path": str(m.init), "sha256": file_sha256(m.init)}
    if m.init_classifier:
        read_public_classifier(m.init_classifier, public_classes or 0, m.embedding_size)
        out["classifier"] = {"path": str(m.init_classifier), "sha256": file_sha256(m.init_classifier)}
    return out
