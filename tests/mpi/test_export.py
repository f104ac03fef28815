"""tools.export: a checkpoint's global backbone as an insightface state_dict (and ONNX) that computes the same
embeddings as the run's final model."""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import torch

from fedmpi.models.iresnet import iresnet
from fedmpi.core.state import BackboneState
from mpi_scripts.ckpt_common import CONFIG, reference_run
from jobs.mpirun import ROOT

MODEL = dict(embedding_size=CONFIG["model"]["embedding_size"], input_size=CONFIG["data"]["image_size"],
             width=CONFIG["model"]["width"])
INSIGHTFACE_KEYS = {"conv1.weight", "bn1.weight", "bn1.running_mean", "prelu.weight", "layer1.0.bn1.weight",
                    "layer1.0.conv1.weight", "layer1.0.prelu.weight", "layer1.0.conv2.weight", "layer1.0.bn3.bias",
                    "layer1.0.downsample.0.weight", "layer1.0.downsample.1.running_var", "layer4.1.conv2.weight",
                    "bn2.weight", "fc.weight", "fc.bias", "features.weight", "features.bias",
                    "features.running_mean"}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return reference_run(tmp_path_factory)


def export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.export", *args], capture_output=True, text=True,
                          timeout=120, cwd=str(ROOT))


def final_model(reference) -> torch.nn.Module:
    """The run's final global model, from the flat Θ its server saved (run.save_final)."""
    model = iresnet("ir18", **MODEL)
    BackboneState(model).write(torch.load(reference.base / "final.pt", weights_only=True)["theta"])
    return model.eval()


def test_the_exported_state_dict_loads_into_iresnet_and_gives_the_run_s_embeddings(reference, tmp_path):
    out = tmp_path / "model.pth"
    result = export(str(reference.ckpt / "round_000006"), "--out", str(out))
    assert result.returncode == 0, result.stderr
    state = torch.load(out, weights_only=True)
    assert INSIGHTFACE_KEYS <= set(state) and all(v.dtype in (torch.float32, torch.int64) for v in state.values())
    model = iresnet("ir18", **MODEL)
    model.load_state_dict(state)  # strict: every key, every shape
    model.eval()
    images = torch.randn(6, 3, MODEL["input_size"], MODEL["input_size"], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(model(images), final_model(reference)(images))


def export_here(capsys, *args: str) -> tuple[int, str, str]:
    """tools.export's main in this process: its status (the command's exit status), output and error output (the
    command's own process runs in the tests beside; each start pays an import of torch)."""
    from tools.export import main

    capsys.readouterr()
    status = main(list(args))
    printed = capsys.readouterr()
    return status, printed.out, printed.err


def test_a_run_folder_exports_its_newest_complete_checkpoint(reference, tmp_path, capsys):
    status, out, err = export_here(capsys, str(reference.folder), "--out", str(tmp_path / "m.pth"))
    assert status == 0, err
    assert "round_000006" in out


def test_exporting_a_missing_checkpoint_is_a_one_line_error(tmp_path, capsys):
    status, _, err = export_here(capsys, str(tmp_path / "nowhere"), "--out", str(tmp_path / "m.pth"))
    assert status == 1
    assert err.strip() == f"error: {tmp_path / 'nowhere'}: no such checkpoint folder"
    assert not (tmp_path / "m.pth").exists()


@pytest.mark.skipif(importlib.util.find_spec("onnx") is None, reason="onnx is not installed")
def test_onnx_export_has_input_data_with_a_dynamic_batch(reference, tmp_path):
    import onnx

    result = export(str(reference.ckpt / "round_000006"), "--out", str(tmp_path / "m.pth"),
                    "--onnx", str(tmp_path / "m.onnx"))
    assert result.returncode == 0, result.stderr
    graph = onnx.load(str(tmp_path / "m.onnx")).graph
    assert [i.name for i in graph.input] == ["data"] and [o.name for o in graph.output] == ["embedding"]
    batch = graph.input[0].type.tensor_type.shape.dim[0]
    assert batch.dim_param == "batch" and not batch.HasField("dim_value")
    if importlib.util.find_spec("onnxruntime") is not None:
        import onnxruntime

        images = torch.randn(3, 3, MODEL["input_size"], MODEL["input_size"])
        session = onnxruntime.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
        (embedding,) = session.run(None, {"data": images.numpy()})
        with torch.no_grad():
            torch.testing.assert_close(torch.from_numpy(embedding), final_model(reference)(images),
                                       rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(importlib.util.find_spec("onnx") is not None, reason="onnx is installed")
def test_without_onnx_the_onnx_export_is_skipped_with_a_message(reference, tmp_path):
    result = export(str(reference.ckpt / "round_000006"), "--out", str(tmp_path / "m.pth"),
                    "--onnx", str(tmp_path / "m.onnx"))
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "--onnx skipped: the onnx package is not installed (pip install onnx)"
    assert (tmp_path / "m.pth").exists() and not (tmp_path / "m.onnx").exists()
