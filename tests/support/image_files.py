"""Image files for tests, written and read with Pillow directly (not through fedmpi.data.images)."""
from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image


def encode_image(img: torch.Tensor, format: str, **options) -> bytes:
    buffer = io.BytesIO()
    array = img.numpy() if img.dim() == 2 else img.permute(1, 2, 0).numpy()  # [H, W] grey or [C, H, W]
    Image.fromarray(array).save(buffer, format=format, **options)
    return buffer.getvalue()


def encode_jpeg(img: torch.Tensor, quality: int = 75) -> bytes:
    return encode_image(img, "JPEG", quality=quality)


def encode_png(img: torch.Tensor) -> bytes:
    return encode_image(img, "PNG")


def read_image(path) -> torch.Tensor:
    """uint8 [3, H, W] RGB pixels of an image file."""
    with Image.open(path) as image:
        return torch.from_numpy(np.asarray(image.convert("RGB")).transpose(2, 0, 1).copy())
