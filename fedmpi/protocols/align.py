"""Face alignment: five landmarks -> the ArcFace 112x112 template by a least-squares similarity (Umeyama),
then a warp with torch's affine_grid/grid_sample.

Pixel coordinates put the centre of pixel (i, j) at x = j, y = i (OpenCV's convention, which the landmark
files and insightface's templates use); the warp samples bilinearly and fills outside the source with zeros
(warpAffine's default border).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

# insightface's arcface_dst: left eye, right eye, nose tip, left and right mouth corner in a 112x112 crop
ARCFACE_TEMPLATE_112 = np.array([[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366],
                                 [41.5493, 92.3655], [70.7299, 92.2041]], dtype=np.float64)


def template(size: int) -> np.ndarray:
    """The five-point template for a size x size crop (the 112 template scaled)."""
    return ARCFACE_TEMPLATE_112 * (size / 112.0)


def umeyama(src, dst) -> np.ndarray:
    """2x3 matrix [cR | t] of the similarity minimising sum |c R src_i + t - dst_i|^2 (Umeyama 1991, eq. 40-42)."""
    src, dst = np.asarray(src, np.float64), np.asarray(dst, np.float64)
    if src.shape != dst.shape or src.ndim != 2 or src.shape[1] != 2 or len(src) < 2:
        raise ValueError(f"umeyama needs two [N, 2] point sets (N >= 2), got {src.shape} and {dst.shape}")
    mean_src, mean_dst = src.mean(0), dst.mean(0)
    src_c, dst_c = src - mean_src, dst - mean_dst
    covariance = dst_c.T @ src_c / len(src)                               # eq. 38
    u, d, vt = np.linalg.svd(covariance)
    s = np.eye(2)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:                          # eq. 39: a reflection is not allowed
        s[1, 1] = -1.0
    rotation = u @ s @ vt                                                 # eq. 40
    variance = (src_c ** 2).sum() / len(src)                              # eq. 36
    if variance == 0:
        raise ValueError("umeyama: all source points coincide")
    scale = np.trace(np.diag(d) @ s) / variance                           # eq. 42
    translation = mean_dst - scale * rotation @ mean_src                  # eq. 41
    return np.concatenate([scale * rotation, translation[:, None]], axis=1)


def warp(image: torch.Tensor, matrix, size: int) -> torch.Tensor:
    """uint8 [3, size, size]: out(p) = image(A^-1 p) for the 2x3 pixel-space map A (source -> output)."""
    matrix = np.asarray(matrix, np.float64)
    h, w = image.shape[-2:]
    inverse = np.linalg.inv(np.vstack([matrix, [0.0, 0.0, 1.0]]))[:2]
    # output normalised coords -> output pixels -> source pixels (A^-1) -> source normalised coords
    to_out_pixels = np.array([[size / 2, 0, (size - 1) / 2], [0, size / 2, (size - 1) / 2], [0, 0, 1]])
    to_src_normalised = np.array([[2 / w, 0, 1 / w - 1], [0, 2 / h, 1 / h - 1], [0, 0, 1]])
    theta = to_src_normalised @ np.vstack([inverse, [0, 0, 1]]) @ to_out_pixels
    grid = F.affine_grid(torch.from_numpy(theta[:2]).float()[None], [1, 3, size, size], align_corners=False)
    out = F.grid_sample(image[None].float(), grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return out[0].round_().clamp_(0, 255).to(torch.uint8)


def align(image: torch.Tensor, landmarks, size: int) -> torch.Tensor:
    """The face with these five landmarks (pixel coordinates in `image`) as an aligned size x size crop."""
    return warp(image, umeyama(landmarks, template(size)), size)
