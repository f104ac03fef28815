"""A trainer's batches decoded on its GPU (`data.decoder=gpu`): the DataLoader's workers only read each record's
stored bytes (the CPU cost of an image is then its read, not its JPEG decode), and the rank decodes the whole
batch's JPEGs in one call on the device (TorchCodec's `decode_jpeg`: nvJPEG), then resizes, flips and
normalises them there with the CPU path's own functions (data/images.py).

TorchCodec, not torchvision: torchvision's image decoders (its `decode_jpeg` on CUDA among them) are deprecated
since torchvision 0.29 in favour of TorchCodec's, which take the same arguments. It is imported only here, by a
rank that decodes on its device.

The same images and labels as the CPU path (`data.decoder=cpu`, Pillow in the workers): the flips and the
order come from the same sampler, a file that is not a JPEG (a PNG) is decoded by Pillow on the host, a record
that cannot be decoded is skipped (data.skip_bad) or named, as on the CPU path. TorchCodec's CPU decoder and
Pillow are both libjpeg-turbo and give the same pixels, so the path run on the CPU gives the CPU path's batches
bit for bit (tests/unit/test_device_decode.py); nvJPEG's inverse DCT may differ from libjpeg's by a few levels
of a pixel.
"""
from __future__ import annotations

import re

import numpy as np
import torch

from .errors import DataError
from .images import Encoded, normalize, resize


class EncodedItems(torch.utils.data.Dataset):
    """A face dataset's items as (stored bytes, flip, label, item index): what a worker hands the device."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index):
        i, flip = index
        j, encoded = self.dataset.first_readable(i, self.dataset.read)
        # the bytes copied: a RecordIO reader's view is of a buffer its next read reuses
        return Encoded(bytes(encoded.data), encoded.path, encoded.record), bool(flip), int(self.dataset.labels[j]), j


def keep_items(items: list) -> list:
    """The DataLoader's collate function: the batch's items as they are (bytes do not stack)."""
    return items


def decode_items(items: list, dataset, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(images float32 [B, 3, S, S] in [-1, 1] on `device`, labels int64 [B] on the host) of one batch of
    EncodedItems, S = dataset.image_size."""
    labels = [label for _, _, label, _ in items]
    images = []
    for k, (image, (_, flip, _, j)) in enumerate(zip(decode_all([e for e, _, _, _ in items], device), items)):
        if isinstance(image, DataError):   # as on the CPU path: named, or skipped for the next readable record
            if not dataset.skip_bad:
                raise image
            dataset.count_bad(image)
            j, image = dataset.first_readable(j + 1, dataset.load)
            labels[k] = int(dataset.labels[j])
            image = image.to(device)
        images.append(normalize(resize(image, dataset.image_size), flip))
    return torch.stack(images), torch.tensor(labels, dtype=torch.int64)


def owned_bytes(data: bytes) -> torch.Tensor:
    """A uint8 tensor of `data`'s bytes, owning its memory (torch.frombuffer would not keep a buffer alive)."""
    return torch.from_numpy(np.frombuffer(data, dtype=np.uint8).copy())


def decode_all(encoded: list[Encoded], device: torch.device) -> list[torch.Tensor | DataError]:
    """uint8 [3, H, W] on `device` for each file, or the DataError of one that cannot be decoded. JPEGs in one
    batched call on the device (one by one only when that call fails, to find the bad file), others by Pillow."""
    from torchcodec.decoders import decode_jpeg

    out: list = [None] * len(encoded)
    jpegs = [k for k, e in enumerate(encoded) if e.is_jpeg]
    data = [owned_bytes(encoded[k].data) for k in jpegs]
    try:
        for k, image in zip(jpegs, decode_jpeg(data, mode="RGB", device=device) if data else []):
            out[k] = image
    except RuntimeError:
        for k, one in zip(jpegs, data):
            try:
                out[k] = decode_jpeg(one, mode="RGB", device=device)
            except RuntimeError as e:   # "<function>, <source file>:<line>, <what>": the what
                reason = re.sub(r"^.*\.cpp:\d+, ", "", str(e)).strip()
                out[k] = DataError(encoded[k].path, f"cannot decode image ({len(one)} bytes): {reason}",
                                   encoded[k].record)
    for k, e in enumerate(encoded):
        if not e.is_jpeg:
            try:
                out[k] = e.decode().to(device)
            except DataError as error:
                out[k] = error
    return out
