"""The clients' data: CIFAR-10 (a `cifar-10-batches-py` folder, or the synthetic set written in that layout),
Hsu et al.'s partition into clients, and the tensors a batch becomes."""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch

from fedmpi.data.cifar import CLASSES, ImageSet, batches_folder, load_cifar10
from fedmpi.data.partition import client_class_histogram, hsu_partition, partition_hash
from fedmpi.data.synthetic_cifar import synthetic_cifar_folder


@dataclass
class ClientData:
    train: ImageSet
    test: ImageSet
    parts: list[np.ndarray]      # client k's indices into train
    mean: torch.Tensor           # per-channel, of the training images (0..1 scale)
    std: torch.Tensor
    description: dict            # for the run log's /data

    per_client = 0               # class-embedding rows a client keeps (the face clients' own; none here)

    def sizes(self) -> np.ndarray:
        return np.array([len(p) for p in self.parts], dtype=np.int64)

    def batch(self, indices: np.ndarray, generator: torch.Generator, augment_images: bool, dtype) -> tuple:
        """(standardised images, labels) of the training `indices`, augmented from `generator` when asked."""
        x = to_tensor(self.train.images[indices], self.mean, self.std, dtype)
        return (augment(x, generator) if augment_images else x), torch.from_numpy(self.train.labels[indices])


def cifar_folder(cfg) -> Path:
    """The `cifar-10-batches-py` folder: the user's, or the synthetic one (written when missing)."""
    c = cfg.clients
    if c.dataset == "cifar10":
        return batches_folder(c.path)
    return synthetic_cifar_folder(cfg.data.root, c.train_images, c.test_images, cfg.data.seed)


def partition(cfg, labels: np.ndarray) -> list[np.ndarray]:
    """Hsu's partition of the training labels; `centralized`: one client holding every training image."""
    c = cfg.clients
    if cfg.fed.setting == "centralized":
        return [np.arange(len(labels), dtype=np.int64)]
    return hsu_partition(labels, c.population, c.images, c.alpha, c.partition_seed,
                         prior=np.full(CLASSES, 1.0 / CLASSES))


def open_clients(cfg):
    """The clients' data: the face clients (crossdevice/face_clients.py) or the CIFAR clients."""
    if cfg.clients.face_clients:
        from fedmpi.crossdevice.face_clients import open_face_clients
        return open_face_clients(cfg)
    return open_client_data(cfg)


def open_client_data(cfg) -> ClientData:
    folder = cifar_folder(cfg)
    train, test, _ = load_cifar10(folder)
    parts = partition(cfg, train.labels)
    mean, std = channel_stats(train.images)
    histogram = client_class_histogram(parts, train.labels, CLASSES)
    c = cfg.clients
    description = {"dataset": c.dataset, "folder": str(folder), "train": len(train), "test": len(test),
                   "clients": {"population": len(parts), "images": int(len(parts[0])), "alpha": c.alpha,
                               "seed": c.partition_seed, "hash": partition_hash(parts),
                               "histogram": histogram.tolist()}}
    return ClientData(train, test, parts, torch.tensor(mean), torch.tensor(std), description)


def channel_stats(images: np.ndarray, chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and standard deviation (population) of uint8 images [n, 3, h, w], on the 0..1 scale, from
    each channel's histogram of byte values: the mean is numpy's to the bit (a sum of bytes is exact in float64),
    the variance (N s2 - s1^2) / N^2 is exact before its one rounding (numpy's pairwise sum of 51 M squares may
    differ from it in the last bit, which float32 inputs never see), and no float64 copy of the images is made."""
    flat = images.reshape(len(images), 3, -1)
    counts = np.zeros((3, 256), dtype=np.int64)
    for lo in range(0, len(flat), chunk):
        for ch in range(3):
            counts[ch] += np.bincount(flat[lo:lo + chunk, ch].ravel(), minlength=256)
    v = np.arange(256, dtype=np.int64)
    mean, std = [], []
    for c in counts:
        n, s1, s2 = int(c.sum()), int(c @ v), int(c @ (v * v))
        mean.append(float(s1) / n)
        std.append(math.sqrt(float(Fraction(n * s2 - s1 * s1, n * n))))
    return np.array(mean) / 255, np.array(std) / 255


def to_tensor(images: np.ndarray, mean: torch.Tensor, std: torch.Tensor, dtype) -> torch.Tensor:
    """uint8 [b, 3, 32, 32] -> standardised float [b, 3, 32, 32]."""
    x = torch.from_numpy(images).to(dtype).div_(255)
    return x.sub_(mean.to(dtype).view(1, 3, 1, 1)).div_(std.to(dtype).view(1, 3, 1, 1))


def augment(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random crop with 4 px zero padding and a random horizontal flip, per image."""
    b, _, h, w = x.shape
    padded = torch.nn.functional.pad(x, (4, 4, 4, 4))
    dy = torch.randint(0, 9, (b,), generator=generator)
    dx = torch.randint(0, 9, (b,), generator=generator)
    flip = torch.rand(b, generator=generator) < 0.5
    out = torch.empty_like(x)
    for i in range(b):
        crop = padded[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w]
        out[i] = crop.flip(-1) if flip[i] else crop
    return out
