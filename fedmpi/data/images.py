"""Image bytes <-> tensors, the way insightface feeds its networks: RGB, [-1, 1], optional horizontal flip.

JPEG and PNG go through Pillow (libjpeg-turbo, zlib): the same pixels torchvision.io's decode_jpeg/decode_image
give and the same JPEG bytes its encode_jpeg writes at equal quality, without torchvision's import (about 2 s
and 190 MB per rank: it pulls in torch._dynamo), so the data path needs torch and Pillow only.
"""
from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, UnidentifiedImageError

from .errors import DataError


def decode(data, path, record=None) -> torch.Tensor:
    """uint8 tensor [3, H, W] (RGB; grey replicated, alpha dropped) from JPEG or PNG bytes (or any format
    Pillow reads); DataError naming the file and record if not."""
    if len(data) == 0:
        raise DataError(path, "empty image", record)
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            rgb = image if image.mode == "RGB" else image.convert("RGB")
            pixels = np.ascontiguousarray(np.asarray(rgb).transpose(2, 0, 1))  # HWC -> CHW, a writable copy
    except UnidentifiedImageError:
        raise DataError(path, f"cannot decode image ({len(data)} bytes): not an image format Pillow reads",
                        record) from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise DataError(path, f"cannot decode image ({len(data)} bytes): {e}", record) from None
    return torch.from_numpy(pixels)


JPEG_MAGIC = b"\xff\xd8"


@dataclass
class Encoded:
    """An image file as stored (JPEG or PNG bytes) and where it came from, for error messages."""
    data: bytes
    path: object
    record: int | None = None

    @property
    def is_jpeg(self) -> bool:
        return bytes(self.data[:2]) == JPEG_MAGIC

    def decode(self) -> torch.Tensor:
        return decode(self.data, self.path, self.record)


def resize(image: torch.Tensor, size: int) -> torch.Tensor:
    """Square `size` x `size` uint8 image (bilinear, antialiased); unchanged when already that size."""
    if image.shape[-1] == size and image.shape[-2] == size:
        return image
    out = F.interpolate(image[None].float(), size=(size, size), mode="bilinear", antialias=True,
                        align_corners=False)
    return out[0].round_().clamp_(0, 255).to(torch.uint8)


def normalize(image: torch.Tensor, flip: bool = False) -> torch.Tensor:
    """float32 [3, H, W] = (x / 255 - 0.5) / 0.5, mirrored left-right when `flip`."""
    if flip:
        image = image.flip(-1)
    return image.to(torch.float32).mul_(2.0 / 255.0).sub_(1.0)


def encode(images: torch.Tensor | list, quality: int = 95, format: str = "JPEG") -> list[bytes]:
    """Encoded bytes (JPEG at `quality`, 4:2:0, or lossless PNG) of each uint8 [3, H, W] image."""
    options = {"quality": quality} if format == "JPEG" else {}
    out = []
    for t in images:
        buffer = io.BytesIO()
        Image.fromarray(t.permute(1, 2, 0).contiguous().numpy()).save(buffer, format=format, **options)
        out.append(buffer.getvalue())
    return out
