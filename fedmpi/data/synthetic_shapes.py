"""Shapes for the synthetic faces' renderer, over a batch of images [B, 3, S, S] at once: per-image scalars
broadcast over the pixel grid, antialiased coverage from signed distances, painting a layer over the last, a
feature's projection under yaw, a 3x3 blur."""
from __future__ import annotations

import numpy as np


def col(x):
    """Per-image scalars [B] -> [B, 1, 1] for broadcasting over the pixel grid."""
    return np.asarray(x, np.float32)[:, None, None]


def soft(d, px):
    """Coverage of a shape from its signed distance d (negative inside), antialiased over one pixel."""
    return np.clip(0.5 - d / px, 0.0, 1.0)


def ellipse(u, v, cx, cy, ax, ay, px):
    ax, ay = np.maximum(ax, 1e-3), np.maximum(ay, 1e-3)
    r = np.sqrt(((u - cx) / ax) ** 2 + ((v - cy) / ay) ** 2)
    return soft((r - 1.0) * np.minimum(ax, ay), px)


def paint(img, mask, colour):
    """img[B,3,S,S] <- img + mask * (colour - img); colour [B, 3] or [B, 3, S, S]."""
    colour = np.asarray(colour, np.float32)
    if colour.ndim == 2:
        colour = colour[:, :, None, None]
    img += mask[:, None] * (colour - img)


def project(x0, y0, a, b, yaw):
    """Where a frontal feature at (x0, y0) lands under yaw on a head of revolution, and its foreshortening."""
    r = a * np.sqrt(np.clip(1 - (y0 / b) ** 2, 0.05, 1.0))
    psi = np.arcsin(np.clip(x0 / r, -0.99, 0.99))
    return r * np.sin(psi + yaw), np.clip(np.cos(psi + yaw) / np.cos(psi), 0.0, 1.2)


def blur3(img):
    p = np.pad(img, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="edge")
    h = 0.25 * p[:, :, :, :-2] + 0.5 * p[:, :, :, 1:-1] + 0.25 * p[:, :, :, 2:]
    return 0.25 * h[:, :, :-2] + 0.5 * h[:, :, 1:-1] + 0.25 * h[:, :, 2:]
