"""Image bytes <-> tensors, the way insightface feeds its networks: RGB, [-1, 1], optional horizontal flip."""
from __future__ import annotations

import re
import warnings

import torch
import torch.nn.functional as F
from torchvision.io import ImageReadMode, decode_image, decode_jpeg, encode_jpeg

from .errors import DataError

JPEG_SOI = b"\xff\xd8"

# torchvision 0.29 warns on every image call that TorchCodec supersedes it; the ops are what we rely on.
warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of TorchVision",
                        category=DeprecationWarning)


def decode(data, path, record=None) -> torch.Tensor:
    """uint8 tensor [3, H, W] (RGB) from JPEG (or PNG) bytes; DataError naming the file and record if not."""
    if len(data) == 0:
        raise DataError(path, "empty image", record)
    writable = isinstance(data, memoryview) and not data.readonly
    raw = torch.frombuffer(data if writable else bytearray(data), dtype=torch.uint8)
    try:
        if bytes(data[:2]) == JPEG_SOI:
            return decode_jpeg(raw, mode=ImageReadMode.RGB)
        return decode_image(raw, mode=ImageReadMode.RGB)
    except (RuntimeError, ValueError) as e:
        text = str(e).strip().splitlines()
        reason = re.sub(r"^.*?\.cpp:\d+,\s*", "", text[0]) if text else type(e).__name__
        raise DataError(path, f"cannot decode image ({len(data)} bytes): {reason}", record) from None


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


def encode(images: torch.Tensor | list, quality: int = 95) -> list[bytes]:
    """JPEG bytes of each uint8 [3, H, W] image."""
    tensors = [t.contiguous() for t in images]
    return [bytes(b.numpy().tobytes()) for b in encode_jpeg(tensors, quality=quality)]
