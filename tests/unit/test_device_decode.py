"""data.decoder=gpu's path (fedmpi/data/device_decode.py) run on the CPU: the same batches as the CPU path, bit for
bit (TorchCodec's CPU decoder and Pillow are both libjpeg-turbo), from a RecordIO holding colour and grey JPEGs of
another size, a PNG and a record that is no image: skipped alike with data.skip_bad, named without it."""
from __future__ import annotations

import io
import itertools

import pytest
import torch
from PIL import Image

from fedmpi.config import load_config
from fedmpi.config.parties import DataConfig
from fedmpi.data import DataError, RecFaceDataset
from fedmpi.data.faces_emore import write_faces_emore
from fedmpi.layout import Party
from fedmpi.silo.party_data import batch_stream

CPU = torch.device("cpu")


def encoded(seed: int, format: str = "JPEG", mode: str = "RGB") -> bytes:
    g = torch.Generator().manual_seed(seed)
    pixels = torch.nn.functional.avg_pool2d(torch.rand(1, 3, 24, 24, generator=g) * 255, 3, 1, 1)[0]
    image = Image.fromarray(pixels.to(torch.uint8).permute(1, 2, 0).numpy()).convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format=format, **({"quality": 90} if format == "JPEG" else {}))
    return buffer.getvalue()


def write_release(folder, bad: bool = True):
    """6 identities of 3 images at 24 px (the trainer resizes to 16): colour JPEGs, a grey one, a PNG and, with
    `bad`, a record whose bytes start like a JPEG and are none."""
    identities = [[encoded(10 * k + j) for j in range(3)] for k in range(6)]
    identities[1][2] = encoded(99, mode="L")
    identities[3][0] = encoded(98, format="PNG")
    if bad:
        identities[4][1] = b"\xff\xd8\xff\xe0 not a JPEG after all"
    folder.mkdir()
    write_faces_emore(folder / "train.rec", folder / "train.idx", identities)
    return folder


def stream(folder, on_device: bool, monkeypatch, skip_bad: bool = True, steps: int = 9):
    """`steps` batches of 4 of a one-rank party's stream (passes of 18 images: every image twice, flipped or not)
    and the dataset they came from."""
    cfg = load_config(None, ["data.image_size=16", "optim.batch_size=4", "data.workers=0"])
    dataset = RecFaceDataset(folder, image_size=16, skip_bad=skip_bad)
    monkeypatch.setattr(DataConfig, "decodes_on", lambda self, device: on_device)
    batches = list(itertools.islice(batch_stream(dataset, Party(0, "p", (1,), ()), 1, cfg, 0, CPU), steps))
    return batches, dataset


def test_decoding_on_the_device_gives_the_cpu_paths_batches_bit_for_bit(tmp_path, monkeypatch):
    folder = write_release(tmp_path / "rec")
    on_host, host_set = stream(folder, False, monkeypatch)
    on_device, device_set = stream(folder, True, monkeypatch)
    for (a, la), (b, lb) in zip(on_host, on_device):
        assert a.dtype == b.dtype == torch.float32 and a.shape == b.shape == (4, 3, 16, 16)
        assert torch.equal(a, b) and torch.equal(la, lb)
    assert host_set.bad_records == device_set.bad_records >= 1   # the bad record, met and skipped on both paths


def test_a_record_that_is_no_image_is_named_without_skip_bad(tmp_path, monkeypatch):
    folder = write_release(tmp_path / "rec")
    with pytest.raises(DataError, match=r"train\.rec record 14: cannot decode image \(25 bytes\): \w[^\n]*$"):
        stream(folder, True, monkeypatch, skip_bad=False)
