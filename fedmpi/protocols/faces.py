"""Benchmark images as the backbone sees them: decoded, aligned by their five landmarks (IJB loose crops) or
resized (MegaFace's aligned crops), embedded once per image with the flip test.

Aligned images can be kept in memory between calls (a run evaluates the same benchmark every few rounds):
`FaceImages(cache_bytes=...)` keeps them when they fit in that budget.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fedmpi.data.errors import DataError
from fedmpi.data.images import decode, resize
from fedmpi.metrics.embed import embed_images
from fedmpi.protocols.align import align


class FaceImages(torch.utils.data.Dataset):
    """Image i: `folder / names[i]`, aligned with landmarks[i] ([5, 2] pixel coordinates) when given."""

    def __init__(self, folder: Path, names: list[str], size: int, landmarks: np.ndarray | None = None,
                 cache_bytes: int = 0):
        self.folder, self.names, self.size, self.landmarks = Path(folder), list(names), int(size), landmarks
        self.cache_bytes = int(cache_bytes)
        self._cache: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, i: int):
        """(uint8 [3, size, size], None) or (empty tensor, (path, reason)): errors travel as plain values
        because DataLoader workers cannot rebuild a DataError."""
        path = self.folder / self.names[i]
        try:
            data = path.read_bytes()
        except OSError as exc:
            return torch.empty(0, dtype=torch.uint8), (str(path), f"cannot read image ({exc.strerror or exc})")
        try:
            image = decode(data, path)
        except DataError as exc:
            return torch.empty(0, dtype=torch.uint8), (exc.path, exc.reason)
        if self.landmarks is not None:
            return align(image, self.landmarks[i], self.size), None
        return resize(image, self.size), None

    def batches(self, batch_size: int, workers: int = 0):
        """uint8 [B, 3, size, size] batches in order; the first unreadable image raises its DataError."""
        if self._cache is not None:
            yield from self._cache.split(batch_size)
            return
        keep = len(self) * 3 * self.size * self.size <= self.cache_bytes
        kept = []
        loader = torch.utils.data.DataLoader(self, batch_size=batch_size, num_workers=workers,
                                             collate_fn=_collate)
        for images, error in loader:
            if error:
                raise DataError(*error)
            if keep:
                kept.append(images)
            yield images
        if keep and kept:
            self._cache = torch.cat(kept)


def _collate(items):
    errors = [e for _, e in items if e]
    if errors:
        return None, errors[0]
    return torch.stack([im for im, _ in items]), None


def embed_faces(backbone: torch.nn.Module, faces: FaceImages, batch_size: int = 128, device="cpu",
                workers: int = 0, normalize: bool = True) -> torch.Tensor:
    """float32 [N, D]: normalize(f(x) + f(flip x)) (or the bare sum) for every image, in file order."""
    chunks = [embed_images(backbone, images, batch_size, device, normalize)
              for images in faces.batches(batch_size, workers)]
    if not chunks:
        raise ValueError(f"{faces.folder}: no images to embed")
    return torch.cat(chunks)
