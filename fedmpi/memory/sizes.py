"""The IResNet's sizes from its settings alone, without torch (memory/model.py's estimate reads them; tests check
them against the built model): its flat state, its trainable values, its feature maps' values per image."""
from __future__ import annotations

STAGE_BLOCKS = {"ir18": (2, 2, 2, 2), "ir34": (3, 4, 6, 3), "ir50": (3, 4, 14, 3), "ir100": (3, 13, 30, 3)}
STAGE_CHANNELS = (64, 128, 256, 512)


def stage_channels(width: float) -> list[int]:
    return [max(1, int(round(c * width))) for c in STAGE_CHANNELS]


def backbone_size(backbone: str, width: float, embedding_size: int, image_size: int) -> tuple[int, int]:
    """(D, n): the IResNet's flat state (parameters and float buffers) and its trainable values
    (models/iresnet.py: BatchNorm keeps weight, bias, running mean and variance; the embedding BN's scale is frozen)."""
    channels = stage_channels(width)
    trainable = 3 * channels[0] * 9 + 3 * channels[0]           # conv1, bn1 (2), prelu
    buffers = 2 * channels[0]
    c_in = channels[0]
    for c, blocks in zip(channels, STAGE_BLOCKS[backbone]):
        for i in range(blocks):
            trainable += 2 * c_in + c_in * c * 9 + 3 * c + c * c * 9 + 2 * c   # bn1, conv1, bn2, prelu, conv2, bn3
            buffers += 2 * c_in + 2 * c + 2 * c
            if i == 0:
                trainable += c_in * c + 2 * c                     # the shortcut's 1x1 conv and BN
                buffers += 2 * c
            c_in = c
    spatial = (image_size // 16) ** 2
    trainable += 2 * c_in + c_in * spatial * embedding_size + embedding_size + embedding_size  # bn2, fc, features.bias
    buffers += 2 * c_in + 2 * embedding_size
    frozen = embedding_size                                       # features.weight
    return trainable + frozen + buffers, trainable


def feature_map_values(backbone: str, width: float, embedding_size: int, image_size: int) -> tuple[int, int]:
    """(every forward output's values, the largest one's) per image."""
    channels = stage_channels(width)
    size = image_size
    total = 3 * channels[0] * size * size                         # conv1, bn1, prelu
    largest = channels[0] * size * size
    c_in = channels[0]
    for c, blocks in zip(channels, STAGE_BLOCKS[backbone]):
        for i in range(blocks):
            out = size // 2 if i == 0 else size
            total += c_in * size * size + 3 * c * size * size + 3 * c * out * out   # bn1; conv1, bn2, prelu; conv2, bn3, +
            if i == 0:
                total += 2 * c * out * out                         # the shortcut
            largest = max(largest, c * size * size)
            size, c_in = out, c
    total += c_in * size * size + 2 * embedding_size
    return total, largest
