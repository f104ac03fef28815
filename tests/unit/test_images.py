"""Image bytes -> RGB uint8 tensors (fedmpi.data.images): the modes real face folders hold, and bad bytes."""
from __future__ import annotations

import pytest
import torch

from fedmpi.data import DataError
from fedmpi.data.images import decode, encode
from image_files import encode_image, encode_png


def pixels(seed: int, channels: int = 3, size: int = 10) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (channels, size, size), generator=g, dtype=torch.uint8)


def test_png_decodes_to_the_exact_pixels():
    img = pixels(0)
    assert torch.equal(decode(encode_png(img), "x.png"), img)
    assert torch.equal(decode(encode(img[None], format="PNG")[0], "x.png"), img)


def test_grey_is_replicated_and_alpha_dropped():
    grey = pixels(1, channels=1)
    assert torch.equal(decode(encode_image(grey[0], "PNG"), "g.png"), grey.expand(3, -1, -1))
    rgba = pixels(2, channels=4)
    assert torch.equal(decode(encode_image(rgba, "PNG"), "a.png"), rgba[:3])


def test_jpeg_round_trip_is_close_and_writable():
    img = torch.tensor([200, 120, 60], dtype=torch.uint8)[:, None, None].expand(3, 16, 16)
    out = decode(encode([img], quality=95)[0], "x.jpg")
    assert out.shape == (3, 16, 16) and out.dtype == torch.uint8 and out.is_contiguous()
    assert (out.int() - img.int()).abs().max() <= 2  # a flat colour survives JPEG almost exactly
    out += 1  # the decoded tensor owns its memory


@pytest.mark.parametrize("data, reason", [(b"", "empty image"),
                                          (b"\xff\xd8 not a jpeg", r"cannot decode image \(13 bytes\): not an "
                                                                  r"image format Pillow reads"),
                                          (b"\x89PNG\r\n\x1a\n" + b"\x00" * 8, r"cannot decode image \(16 bytes\)")])
def test_bad_bytes_name_the_file_and_record(data, reason):
    with pytest.raises(DataError, match=rf"faces.rec record 7: {reason}"):
        decode(data, "faces.rec", record=7)
