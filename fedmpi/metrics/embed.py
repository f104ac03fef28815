"""Embeddings for verification: backbone(image) + backbone(flipped image), L2-normalised (insightface's protocol)."""
from __future__ import annotations

import numpy as np
import torch


def normalize_images(images_uint8: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """uint8 [N, 3, H, W] in 0..255 -> float in [-1, 1]: (x / 255 - 0.5) / 0.5."""
    return (images_uint8.to(dtype) / 255.0 - 0.5) / 0.5


def _check_images(images) -> None:
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8:
        raise ValueError(f"images must be a uint8 torch tensor, got {getattr(images, 'dtype', type(images))}")
    if images.ndim != 4 or images.shape[1] != 3:
        raise ValueError(f"images must have shape [N, 3, H, W], got {tuple(images.shape)}")


def embed_images(backbone: torch.nn.Module, images_uint8: torch.Tensor, batch_size: int = 128,
                 device="cpu", normalize: bool = True, flip: bool = True) -> torch.Tensor:
    """[N, D] float32 on the CPU: normalize(f(x) + f(flip_w(x))), f in eval mode without gradients; with
    normalize=False the sum itself (its norm kept, as insightface's IJB protocol pools it); with flip=False
    f(x) alone (insightface's verification.py reports both: acc1 without the flip, acc2 with the sum).

    The backbone's training flag is restored afterwards; the backbone must already be on `device`.
    """
    _check_images(images_uint8)
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    device = torch.device(device)
    parameter = next(backbone.parameters(), None)
    dtype = parameter.dtype if parameter is not None else torch.float32
    was_training = backbone.training
    backbone.eval()
    chunks = []
    try:
        with torch.no_grad():
            for start in range(0, len(images_uint8), batch_size):
                batch = normalize_images(images_uint8[start:start + batch_size].to(device), dtype)
                summed = backbone(batch) + backbone(torch.flip(batch, dims=(3,))) if flip else backbone(batch)
                summed = summed.float()
                chunks.append((torch.nn.functional.normalize(summed, dim=1) if normalize else summed).cpu())
    finally:
        backbone.train(was_training)
    if not chunks:
        raise ValueError("no images to embed")
    return torch.cat(chunks)


def set_batches(dataset, indices, batch: int):
    """(positions, images) of a face dataset's items `indices`, `batch` at a time: its own normalised images
    [b, 3, H, W], unflipped (FedFR's passes over a party's and the public set: no augmentation)."""
    for start in range(0, len(indices), batch):
        part = indices[start:start + batch]
        yield part, torch.stack([dataset[(int(i), False)][0] for i in part])


def pair_scores(embeddings) -> np.ndarray:
    """Cosine similarity of rows (2i, 2i+1), float64 [N/2]."""
    emb = embeddings.detach().cpu().numpy() if isinstance(embeddings, torch.Tensor) else np.asarray(embeddings)
    emb = emb.astype(np.float64)
    if emb.ndim != 2 or len(emb) % 2:
        raise ValueError(f"embeddings must be [2N, D] with an even number of rows, got shape {emb.shape}")
    first, second = emb[0::2], emb[1::2]
    norms = np.linalg.norm(first, axis=1) * np.linalg.norm(second, axis=1)
    if (norms == 0).any():
        raise ValueError("an embedding of a pair is the zero vector; its cosine similarity is undefined")
    return np.einsum("ij,ij->i", first, second) / norms
