"""Synthetic faces: a seeded, vectorised numpy renderer of identity-consistent face-like images.

An identity is a fixed draw of face shape, skin tone, eye/brow/nose/mouth geometry, hair, glasses, beard
and a skin texture; each image of it varies pose (yaw as features moving over a head of revolution, roll,
shift, scale), illumination (a light direction over the head's normals, a gradient, brightness), expression
(smile, open mouth, eye openness, brow raise), age, occlusion, blur, noise and colour cast. A style is a
party's prior over all of these (skin-tone and hair distributions, pose spread, casts, blur), and the
identity seeds depend on the style, so parties and validation sets never share an identity.

Everything is a pure function of (style, seed, index): the same call gives the same bytes.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from fedmpi.data.synthetic_render import render

# Skin palette from light to dark (RGB in [0, 1]); a tone in [0, 1] interpolates along it.
_SKIN = np.array([[0.97, 0.84, 0.74], [0.90, 0.72, 0.58], [0.76, 0.55, 0.40], [0.55, 0.37, 0.25],
                  [0.34, 0.22, 0.15]], dtype=np.float32)
_HAIR = np.array([[0.06, 0.05, 0.05], [0.25, 0.15, 0.08], [0.45, 0.30, 0.16], [0.82, 0.68, 0.42],
                  [0.62, 0.28, 0.12], [0.62, 0.62, 0.62]], dtype=np.float32)  # black brown chestnut blond red grey
_IRIS = np.array([[0.25, 0.14, 0.07], [0.10, 0.07, 0.05], [0.25, 0.45, 0.70], [0.30, 0.45, 0.25]], np.float32)


@dataclass(frozen=True)
class Style:
    """A population's prior: what its identities look like and how its photographs vary."""
    tone_range: tuple = (0.0, 1.0)      # skin tone interval on the palette
    tone_power: float = 1.0             # > 1 favours the light end
    skin_tint: tuple = (1.0, 1.0, 1.0)
    hair_weights: tuple = (0.3, 0.25, 0.15, 0.12, 0.08, 0.10)
    glasses_p: float = 0.2
    beard_p: float = 0.25
    yaw_sd: float = 18.0                # degrees
    roll_sd: float = 5.0
    shift_sd: float = 0.04
    light: float = 0.35                 # directional light strength
    cast: tuple = (1.0, 1.0, 1.0)
    cast_jitter: float = 0.03
    blur: float = 0.0                   # 0..1, mix of a 3x3 blur (applied twice at 1)
    noise: float = 0.02
    occlusion_p: float = 0.08
    background: tuple = (0.2, 0.9)      # background brightness interval
    expression: float = 1.0             # scale of smile/open-mouth/blink variation
    age_sd: float = 0.15


STYLES = {
    "ms1m": Style(tone_power=1.4),
    "ga": Style(tone_range=(0.05, 0.45), skin_tint=(1.0, 0.98, 0.88), hair_weights=(0.85, 0.12, 0.03, 0, 0, 0),
                glasses_p=0.3, beard_p=0.08, yaw_sd=14.0, roll_sd=4.0, light=0.25, cast=(1.04, 1.0, 0.92),
                blur=0.25, noise=0.03, background=(0.55, 0.95)),
    "vgg": Style(tone_range=(0.0, 0.9), hair_weights=(0.25, 0.25, 0.15, 0.2, 0.08, 0.07), glasses_p=0.15,
                 beard_p=0.3, yaw_sd=32.0, roll_sd=9.0, shift_sd=0.07, light=0.55, cast=(0.95, 1.0, 1.07),
                 cast_jitter=0.08, blur=0.6, noise=0.03, occlusion_p=0.18, background=(0.05, 0.95),
                 expression=1.3, age_sd=0.25),
    "val": Style(yaw_sd=12.0, roll_sd=4.0, light=0.3, occlusion_p=0.05),
    # data.public's synthetic set: ms1m's prior under a name of its own, so its identity seeds are no party's
    "public": Style(tone_power=1.4),
}

# Per-identity uniforms, one column each (their order fixes what a seed means; append, never reorder).
_IDENTITY_FIELDS = ("face_w", "face_h", "jaw", "tone", "tint", "hair", "hair_len", "hairline", "fringe",
                    "part", "bald", "eye_y", "eye_dx", "eye_w", "eye_h", "iris", "brow_gap", "brow_thick",
                    "brow_slant", "nose_len", "nose_w", "mouth_y", "mouth_w", "lip", "lip_red", "beard",
                    "beard_density", "glasses", "glasses_r", "mole1", "mole1_x", "mole1_y", "mole2", "mole2_x",
                    "mole2_y", "tex_fu", "tex_fv", "tex_phase", "tex_amp", "age0")
_VIEW_FIELDS = ("yaw", "roll", "tx", "ty", "scale", "light_az", "light_el", "light_amt", "bright", "grad",
                "grad_az", "smile", "mouth_open", "blink", "eye_open", "brow_raise", "gaze", "age",
                "occlude", "occ_kind", "occ_x", "occ_y", "occ_w", "occ_h", "occ_r", "occ_g", "occ_b",
                "bg_r", "bg_g", "bg_b", "bg_grad", "cast_r", "cast_g", "cast_b", "blur", "noise_seed")


def _normal(u):
    """Standard normal quantile of uniforms (Acklam-style rational approximation, |error| < 5e-4)."""
    u = np.clip(u, 1e-6, 1 - 1e-6)
    t = np.sqrt(-2.0 * np.log(np.minimum(u, 1 - u)))
    z = t - (2.515517 + 0.802853 * t + 0.010328 * t * t) / (1 + 1.432788 * t + 0.189269 * t * t + 0.001308 * t ** 3)
    return np.where(u < 0.5, -z, z)


def identity_keys(style: str, count: int, seed: int = 0, first: int = 0) -> np.ndarray:
    """uint64 keys of identities first..first+count-1 of a style: the style is part of every seed."""
    code = zlib.crc32(style.encode())
    keys = [np.random.SeedSequence([seed, code, first + i]).generate_state(2, np.uint32) for i in range(count)]
    return np.array([(int(k[0]) << 32) | int(k[1]) for k in keys], dtype=np.uint64)


def identity_uniforms(keys: np.ndarray) -> np.ndarray:
    """[C, len(_IDENTITY_FIELDS)] uniforms, row i a function of keys[i] alone."""
    rows = [np.random.default_rng(int(k)).random(len(_IDENTITY_FIELDS)) for k in keys]
    return np.array(rows, dtype=np.float32).reshape(len(keys), len(_IDENTITY_FIELDS))


def view_uniforms(keys: np.ndarray, views: int, salt: int = 1) -> np.ndarray:
    """[C, views, len(_VIEW_FIELDS)] uniforms for the images of each identity."""
    return np.stack([np.random.default_rng([int(k), salt]).random((views, len(_VIEW_FIELDS)))
                     for k in keys]).astype(np.float32)


class _Cols:
    """Named column access to a uniform matrix."""

    def __init__(self, u: np.ndarray, names):
        self._u, self._i = u, {n: i for i, n in enumerate(names)}

    def __getattr__(self, name):
        return self._u[..., self._i[name]]


def identity_params(u: np.ndarray, style: Style) -> dict:
    """Identity uniforms [N, F] -> named parameter arrays [N] (and colours [N, 3]) under a style."""
    c = _Cols(u, _IDENTITY_FIELDS)
    lo, hi = style.tone_range
    tone = lo + (hi - lo) * c.tone ** style.tone_power
    pos = tone * (len(_SKIN) - 1)
    i0 = np.minimum(pos.astype(int), len(_SKIN) - 2)
    skin = _SKIN[i0] + (pos - i0)[:, None] * (_SKIN[i0 + 1] - _SKIN[i0])
    skin = skin * np.asarray(style.skin_tint, np.float32) * (0.96 + 0.08 * c.tint)[:, None]
    w = np.asarray(style.hair_weights, np.float64)
    hair_idx = np.searchsorted(np.cumsum(w / w.sum()), c.hair, side="right").clip(0, len(_HAIR) - 1)
    hair = _HAIR[hair_idx] * (0.85 + 0.3 * c.tint)[:, None]
    lip = skin * np.array([0.80, 0.52, 0.52], np.float32) + np.array([0.10, 0.0, 0.02], np.float32) * c.lip_red[:, None]
    return dict(
        a=0.50 + 0.14 * c.face_w, b=0.68 + 0.14 * c.face_h, jaw=1.6 + 1.2 * c.jaw, skin=skin.astype(np.float32),
        hair=hair.astype(np.float32), hair_len=c.hair_len, hairline=-0.62 + 0.22 * c.hairline,
        fringe=np.where(c.fringe > 0.6, 0.08 + 0.2 * (c.fringe - 0.6), 0.0), part=-0.3 + 0.6 * c.part,
        bald=c.bald < 0.06, eye_y=-0.20 + 0.10 * c.eye_y, eye_dx=0.19 + 0.09 * c.eye_dx,
        eye_w=0.085 + 0.045 * c.eye_w, eye_h=0.035 + 0.025 * c.eye_h,
        iris=_IRIS[np.minimum((c.iris * len(_IRIS)).astype(int), len(_IRIS) - 1)],
        brow_gap=0.08 + 0.07 * c.brow_gap, brow_thick=0.018 + 0.03 * c.brow_thick,
        brow_slant=-0.35 + 0.7 * c.brow_slant,
        nose_len=0.17 + 0.12 * c.nose_len, nose_w=0.05 + 0.06 * c.nose_w, mouth_y=0.34 + 0.12 * c.mouth_y,
        mouth_w=0.12 + 0.10 * c.mouth_w, lip=lip.astype(np.float32), lip_h=0.018 + 0.022 * c.lip,
        beard=np.where(c.beard < style.beard_p, 0.4 + 0.45 * c.beard_density, 0.0),
        glasses=c.glasses < style.glasses_p, glasses_r=1.25 + 0.5 * c.glasses_r,
        moles=np.stack([c.mole1 < 0.35, c.mole2 < 0.35], 1),
        mole_xy=np.stack([np.stack([-0.5 + c.mole1_x, -0.1 + 0.5 * c.mole1_y], 1),
                          np.stack([-0.5 + c.mole2_x, -0.1 + 0.5 * c.mole2_y], 1)], 1),
        tex_f=np.stack([4 + 10 * c.tex_fu, 4 + 10 * c.tex_fv], 1), tex_phase=6.283 * c.tex_phase,
        tex_amp=0.02 + 0.05 * c.tex_amp, age0=-0.3 + 0.6 * c.age0,
    )


def view_params(u: np.ndarray, style: Style) -> dict:
    """View uniforms [N, F] -> per-image nuisance parameters [N] under a style."""
    c = _Cols(u, _VIEW_FIELDS)
    e = style.expression
    cast = np.asarray(style.cast, np.float32) * (1 + style.cast_jitter * _normal(
        np.stack([c.cast_r, c.cast_g, c.cast_b], 1)))
    return dict(
        yaw=np.radians(np.clip(style.yaw_sd * _normal(c.yaw), -80, 80)),
        roll=np.radians(style.roll_sd * _normal(c.roll)), tx=style.shift_sd * _normal(c.tx),
        ty=style.shift_sd * _normal(c.ty), scale=1.0 + 0.05 * _normal(c.scale),
        light_az=6.283 * c.light_az, light_el=0.2 + 0.9 * c.light_el, light=style.light * c.light_amt,
        bright=1.0 + 0.12 * _normal(c.bright), grad=0.15 * c.grad, grad_az=6.283 * c.grad_az,
        smile=np.clip(e * (-0.4 + 1.4 * c.smile), -0.6, 1.0),
        mouth_open=np.where(c.mouth_open < 0.25 * e, 0.3 + 0.7 * c.eye_open, 0.0),
        eye_open=np.where(c.blink < 0.06 * e, 0.15, 0.7 + 0.3 * c.eye_open),
        brow_raise=0.03 * e * _normal(c.brow_raise), gaze=0.5 * _normal(c.gaze),
        age=style.age_sd * _normal(c.age),
        occlusion=np.where(c.occlude < style.occlusion_p, (c.occ_kind * 3).astype(int) + 1, 0),
        occ_xywh=np.stack([-0.6 + 1.2 * c.occ_x, -0.5 + 1.2 * c.occ_y, 0.15 + 0.3 * c.occ_w, 0.15 + 0.3 * c.occ_h], 1),
        occ_rgb=np.stack([c.occ_r, c.occ_g, c.occ_b], 1),
        background=(style.background[0] + (style.background[1] - style.background[0]) * c.bg_r[:, None]
                    + 0.35 * (np.stack([c.bg_g, c.bg_b, c.bg_g * c.bg_b], 1) - 0.5)).clip(0, 1),
        bg_grad=-0.3 + 0.6 * c.bg_grad,
        cast=cast.astype(np.float32), blur=style.blur * (0.5 + c.blur), noise=style.noise * (0.5 + c.blur),
        noise_seed=(c.noise_seed * 2 ** 31).astype(np.int64),
    )


def _take(params: dict, rows: np.ndarray) -> dict:
    return {k: v[rows] for k, v in params.items()}


def render_chunked(ident: dict, view: dict, size: int, chunk: int = 256) -> np.ndarray:
    n = len(view["yaw"])
    out = np.empty((n, 3, size, size), np.uint8)
    for s in range(0, n, chunk):
        rows = np.arange(s, min(n, s + chunk))
        out[rows] = render(_take(ident, rows), _take(view, rows), size)
    return out


def style_of(name: str) -> Style:
    """A training set's style: a party's (ms1m, ga, vgg; the config's choices) or the public set's (public)."""
    if name not in STYLES or name == "val":
        raise ValueError(f"unknown synthetic style {name!r}: expected one of ms1m, ga, vgg, public")
    return STYLES[name]


def generate_party(style: str, identities: int, images_per_identity: int, size: int, seed: int = 0, first: int = 0):
    """(uint8 [C*I, 3, S, S] images grouped by identity, int64 labels [C*I], uint64 identity keys [C]) of the
    style's identities first..first+C-1: identity i is the same person in every call that draws it (its key is
    a function of (seed, style, i) alone), and identities of distinct indices are different people."""
    prior = style_of(style)
    if identities < 1 or images_per_identity < 1 or size < 8:
        raise ValueError(f"synthetic set needs identities >= 1, images_per_identity >= 1, size >= 8 "
                         f"(got {identities}, {images_per_identity}, {size})")
    keys = identity_keys(style, identities, seed, first)
    ident = identity_params(identity_uniforms(keys), prior)
    views = view_uniforms(keys, images_per_identity).reshape(identities * images_per_identity, -1)
    labels = np.repeat(np.arange(identities), images_per_identity)
    images = render_chunked(_take(ident, labels), view_params(views, prior), size)
    return images, labels, keys
