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


# ---------------------------------------------------------------------------------------------- rendering

HEAD_SCALE, HEAD_Y = 1.2, 0.08  # canonical head frame -> image: faces fill the crop as aligned 112x112 faces do

def _col(x):
    """Per-image scalars [B] -> [B, 1, 1] for broadcasting over the pixel grid."""
    return np.asarray(x, np.float32)[:, None, None]


def _soft(d, px):
    """Coverage of a shape from its signed distance d (negative inside), antialiased over one pixel."""
    return np.clip(0.5 - d / px, 0.0, 1.0)


def _ellipse(u, v, cx, cy, ax, ay, px):
    ax, ay = np.maximum(ax, 1e-3), np.maximum(ay, 1e-3)
    r = np.sqrt(((u - cx) / ax) ** 2 + ((v - cy) / ay) ** 2)
    return _soft((r - 1.0) * np.minimum(ax, ay), px)


def _paint(img, mask, colour):
    """img[B,3,S,S] <- img + mask * (colour - img); colour [B, 3] or [B, 3, S, S]."""
    colour = np.asarray(colour, np.float32)
    if colour.ndim == 2:
        colour = colour[:, :, None, None]
    img += mask[:, None] * (colour - img)


def _project(x0, y0, a, b, yaw):
    """Where a frontal feature at (x0, y0) lands under yaw on a head of revolution, and its foreshortening."""
    r = a * np.sqrt(np.clip(1 - (y0 / b) ** 2, 0.05, 1.0))
    psi = np.arcsin(np.clip(x0 / r, -0.99, 0.99))
    return r * np.sin(psi + yaw), np.clip(np.cos(psi + yaw) / np.cos(psi), 0.0, 1.2)


def _blur3(img):
    p = np.pad(img, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="edge")
    h = 0.25 * p[:, :, :, :-2] + 0.5 * p[:, :, :, 1:-1] + 0.25 * p[:, :, :, 2:]
    return 0.25 * h[:, :, :-2] + 0.5 * h[:, :, 1:-1] + 0.25 * h[:, :, 2:]


def render(ident: dict, view: dict, size: int) -> np.ndarray:
    """uint8 [B, 3, size, size] images; `ident` and `view` hold one row per image."""
    n = len(view["yaw"])
    g = (np.arange(size, dtype=np.float32) + 0.5) / size * 2 - 1
    x, y = g[None, None, :], g[:, None][None]
    # image -> canonical head frame: undo shift, roll and scale (head centre a little below the crop centre)
    scale = _col(HEAD_SCALE * view["scale"])
    cr, sr = _col(np.cos(view["roll"])), _col(np.sin(view["roll"]))
    xs, ys = x - _col(view["tx"]), y - _col(HEAD_Y + view["ty"])
    u = (cr * xs + sr * ys) / scale
    v = (-sr * xs + cr * ys) / scale
    px = 2.0 / size / scale
    age = ident["age0"] + view["age"]
    yaw = view["yaw"]
    a = ident["a"] * (1 + 0.04 * np.clip(age, -1, 1))
    b = ident["b"]
    A, B = _col(a), _col(b)

    bg = np.asarray(view["background"], np.float32)
    img = np.empty((n, 3, size, size), np.float32)
    img[:] = bg[:, :, None, None] * (1 + _col(view["bg_grad"])[:, None] * y[:, None])

    hair = ident["hair"] + np.clip(age, 0, 1)[:, None] * (np.array([0.7, 0.7, 0.7], np.float32) - ident["hair"])
    has_hair = ~ident["bald"]
    # hair behind the head: seen more on the far side as the head turns
    back = _ellipse(u, v, _col(-0.22 * a * np.sin(yaw)), _col(-0.12 * b - 0.02 * ident["hair_len"]),
                    _col(a * (1.10 + 0.12 * ident["hair_len"])), _col(b * (0.92 + 0.35 * ident["hair_len"])), px)
    _paint(img, back * _col(has_hair), hair)
    neck = _soft(np.maximum(np.abs(u) - 0.55 * A, 0.3 * B - v), px)
    _paint(img, neck, ident["skin"] * 0.82)

    # face: an ellipse above the eyes' line, a superellipse (jaw) below
    n_exp = np.where(v > 0, _col(ident["jaw"]), 2.0)
    rho = (np.abs(u / A) ** n_exp + np.abs(v / B) ** n_exp) ** (1.0 / n_exp)
    face = _soft((rho - 1.0) * np.minimum(A, B), px)
    skin = ident["skin"] * (1 - 0.06 * np.clip(age, 0, 1))[:, None]
    centre_x, _ = _project(np.zeros(n), np.zeros(n), a, b, yaw)
    uc = u - _col(centre_x)  # horizontal position relative to the turned face's midline
    texture = 1 + _col(ident["tex_amp"]) * np.sin(_col(ident["tex_f"][:, 0]) * uc + _col(ident["tex_f"][:, 1]) * v
                                                  + _col(ident["tex_phase"]))
    _paint(img, face, skin[:, :, None, None] * texture[:, None])

    def feature(x0, y0):
        """Projected x and foreshortening of a frontal feature point, per image."""
        zero = np.zeros(n, np.float32)
        return _project(x0 + zero, y0 + zero, a, b, yaw)

    # moles: identity marks on the skin
    for k in range(2):
        mx, mf = feature(ident["mole_xy"][:, k, 0] * a, ident["mole_xy"][:, k, 1] * b)
        mole = _ellipse(u, v, _col(mx), _col(ident["mole_xy"][:, k, 1] * b), _col(0.028 * mf), 0.028, px)
        _paint(img, mole * face * _col(ident["moles"][:, k] & (mf > 0.3)), skin * 0.45)

    # beard and moustache below the nose
    nose_tip = ident["eye_y"] + ident["nose_len"]
    mouth_x, _ = feature(0.0, ident["mouth_y"])
    below_mouth = (v - _col(ident["mouth_y"])) / 0.05
    chin = np.clip(below_mouth / 1.2 + 0.33, 0, 1) * np.clip((np.abs(uc) - 0.55 * A) / (0.1 * A) + below_mouth, 0, 1)
    moustache = _soft(np.maximum(np.abs(v - _col((nose_tip + ident["mouth_y"]) / 2 + 0.005)) - 0.025,
                                 np.abs(u - _col(mouth_x)) - _col(ident["mouth_w"] * 1.1)), px)
    beard = face * np.maximum(chin, moustache) * _col(ident["beard"])
    _paint(img, beard, hair * 0.9)

    # hair over the forehead, with fringe around the parting and longer sides
    fringe = np.clip(1 - ((uc - _col(ident["part"] * a)) / (0.7 * A)) ** 2, 0, 1)
    sides = np.clip(np.abs(uc) / A, 0, 1) ** 4
    hl = _col(ident["hairline"]) + _col(ident["fringe"]) * fringe + _col(0.1 + 0.3 * ident["hair_len"]) * sides
    hl = np.where(np.abs(uc) < 0.75 * A, np.minimum(hl, _col(ident["eye_y"] - 0.1)), hl)  # eyes stay free
    front = np.maximum(face, back) * _soft(v - hl, px) * _col(has_hair)
    _paint(img, front, hair)

    # eyes, brows, glasses
    eye_y = ident["eye_y"]
    brow_y = eye_y - ident["brow_gap"] - view["brow_raise"]
    for side in (-1.0, 1.0):
        ex, ef = feature(side * ident["eye_dx"], eye_y)
        visible = _col(ef > 0.12)
        ew, eh = ident["eye_w"] * ef, ident["eye_h"] * view["eye_open"] * (1 - 0.15 * np.clip(age, 0, 1))
        white = _ellipse(u, v, _col(ex), _col(eye_y), _col(ew), _col(eh), px) * face * visible
        _paint(img, white, np.full((n, 3), 0.93, np.float32))
        iris_x = ex + view["gaze"] * 0.3 * ew
        iris = np.minimum(_ellipse(u, v, _col(iris_x), _col(eye_y), _col(ident["eye_h"] * ef * 0.95),
                                   _col(ident["eye_h"] * 0.95), px), white)
        _paint(img, iris, ident["iris"])
        pupil = np.minimum(_ellipse(u, v, _col(iris_x), _col(eye_y), _col(ident["eye_h"] * ef * 0.45),
                                    _col(ident["eye_h"] * 0.45), px), white)
        _paint(img, pupil, np.full((n, 3), 0.03, np.float32))
        bx, bf = feature(side * ident["eye_dx"] * 1.05, brow_y)
        slant = _col(side * ident["brow_slant"])
        du, dv = u - _col(bx), v - _col(brow_y)
        brow = _ellipse(du, dv + slant * du, 0.0, 0.0, _col(ident["eye_w"] * 1.35 * bf),
                        _col(ident["brow_thick"]), px) * face * _col(bf > 0.12)
        _paint(img, brow, hair * 0.8)
        if ident["glasses"].any():
            gr = ident["eye_w"] * ident["glasses_r"]
            rim = _ellipse(u, v, _col(ex), _col(eye_y), _col(gr * ef), _col(gr * 0.8), px)
            ring = np.minimum(rim, 1 - _ellipse(u, v, _col(ex), _col(eye_y), _col(gr * ef - 0.022),
                                                _col(gr * 0.8 - 0.022), px))
            _paint(img, ring * _col(ident["glasses"] & (ef > 0.12)), np.full((n, 3), 0.08, np.float32))
    if ident["glasses"].any():
        lx, _ = feature(-ident["eye_dx"] + ident["eye_w"] * ident["glasses_r"], eye_y)
        rx, _ = feature(ident["eye_dx"] - ident["eye_w"] * ident["glasses_r"], eye_y)
        bridge = _soft(np.maximum(np.abs(v - _col(eye_y - 0.02)) - 0.012,
                                  np.abs(u - _col((lx + rx) / 2)) - _col(np.abs(rx - lx) / 2)), px)
        _paint(img, bridge * _col(ident["glasses"]), np.full((n, 3), 0.08, np.float32))

    # nose: a shadow along its side and two nostrils; it sticks out, so it moves further under yaw
    nose_x, _ = feature(np.zeros(n), nose_tip)
    nose_x = nose_x + 0.08 * np.sin(yaw)
    side = np.where(yaw >= 0, -1.0, 1.0)
    ridge = _ellipse(u, v, _col(nose_x + side * ident["nose_w"] * 0.6), _col(eye_y + 0.55 * ident["nose_len"]),
                     _col(0.022 + 0.02 * np.abs(np.sin(yaw))), _col(0.5 * ident["nose_len"]), px) * face
    _paint(img, ridge, skin * 0.72)
    for s in (-1.0, 1.0):
        nx, nf = feature(s * ident["nose_w"] * 0.5, nose_tip)
        nostril = _ellipse(u, v, _col(nx + 0.08 * np.sin(yaw)), _col(nose_tip), _col(0.022 * nf + 1e-3), 0.014, px)
        _paint(img, nostril * face * _col(nf > 0.2), skin * 0.4)

    # mouth: lips along a parabola bent by the smile, dark inside when open
    mouth_y = ident["mouth_y"] + 0.02 * np.clip(age, 0, 1)
    mx, mf = feature(np.zeros(n), mouth_y)
    half_w = ident["mouth_w"] * np.maximum(mf, 0.2)
    t = np.clip((u - _col(mx)) / _col(half_w), -1.5, 1.5)
    centre = _col(mouth_y) - _col(0.05 * view["smile"]) * (1 - t ** 2)
    inside_w = np.clip(1 - t ** 2, 0, 1)
    gap = _col(view["mouth_open"] * 0.045)
    lips = _soft(np.abs(v - centre) - (_col(ident["lip_h"]) + gap) * np.sqrt(inside_w), px) * (np.abs(t) < 1) * face
    _paint(img, lips, ident["lip"])
    opening = _soft(np.abs(v - centre) - gap * np.sqrt(inside_w), px) * (np.abs(t) < 0.9) * face * (gap > 0)
    _paint(img, opening, np.full((n, 3), 0.12, np.float32))

    # wrinkles on the forehead with age
    wr = face * _col(np.clip(age, 0, 1) * 0.5) * (np.sin(v * 70.0) > 0.7) * (v < _col(brow_y - 0.05)) * (v > hl + 0.03)
    img *= 1 - 0.25 * wr[:, None]

    # illumination: light on the head's normals, then a global gradient and brightness
    head = np.maximum(face, back * _col(has_hair))
    nx_, ny_ = np.clip(uc / A, -1, 1), np.clip(v / B, -1, 1)
    nz_ = np.sqrt(np.clip(1 - nx_ ** 2 - ny_ ** 2, 0, 1))
    el, az = view["light_el"], view["light_az"]
    lx, ly, lz = np.sin(el) * np.cos(az), np.sin(el) * np.sin(az), np.cos(el)
    shade = np.clip(_col(lx) * nx_ + _col(ly) * ny_ + _col(lz) * nz_, 0, 1)
    img *= (1 + head * _col(view["light"]) * (shade - 0.7))[:, None]
    ga = view["grad_az"]
    img *= (_col(view["bright"]) * (1 + _col(view["grad"]) * (_col(np.cos(ga)) * x + _col(np.sin(ga)) * y)))[:, None]

    # occlusion: 1 a patch, 2 sunglasses, 3 a mask over the lower face
    occ = view["occlusion"]
    if occ.any():
        ox, oy, ow, oh = (view["occ_xywh"][:, i] for i in range(4))
        patch = _soft(np.maximum(np.abs(x - _col(ox)) - _col(ow), np.abs(y - _col(oy)) - _col(oh)), 2.0 / size)
        _paint(img, patch * _col(occ == 1), view["occ_rgb"])
        eye_img_y = HEAD_Y + view["ty"] + HEAD_SCALE * view["scale"] * eye_y
        band = _soft(np.abs(y - _col(eye_img_y)) - _col(0.07 * view["scale"]), 2.0 / size) * (np.abs(x) < 0.75)
        _paint(img, band * _col(occ == 2), 0.1 * view["occ_rgb"])
        mask_top = HEAD_Y + view["ty"] + HEAD_SCALE * view["scale"] * (nose_tip - 0.03)
        lower = face * _soft(_col(mask_top) - y, 2.0 / size)
        _paint(img, lower * _col(occ == 3), 0.75 + 0.25 * view["occ_rgb"])

    img *= view["cast"][:, :, None, None]
    if (view["blur"] > 0).any():
        w = _col(np.clip(view["blur"], 0, 1))[:, None]
        soft = _blur3(img)
        img = img + w * (soft - img)
        img = img + np.clip(w - 0.5, 0, 1) * (_blur3(img) - img)
    noise = np.stack([np.random.default_rng(int(s)).standard_normal((3, size, size), dtype=np.float32)
                      for s in view["noise_seed"]])
    img += _col(view["noise"])[:, None] * noise
    return (np.clip(img, 0, 1) * 255 + 0.5).astype(np.uint8)


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
    if name not in STYLES or name == "val":
        raise ValueError(f"unknown synthetic style {name!r}: expected one of ms1m, ga, vgg")
    return STYLES[name]


def generate_party(style: str, identities: int, images_per_identity: int, size: int, seed: int = 0):
    """(uint8 [C*I, 3, S, S] images grouped by identity, int64 labels [C*I], uint64 identity keys [C])."""
    prior = style_of(style)
    if identities < 1 or images_per_identity < 1 or size < 8:
        raise ValueError(f"synthetic set needs identities >= 1, images_per_identity >= 1, size >= 8 "
                         f"(got {identities}, {images_per_identity}, {size})")
    keys = identity_keys(style, identities, seed)
    ident = identity_params(identity_uniforms(keys), prior)
    views = view_uniforms(keys, images_per_identity).reshape(identities * images_per_identity, -1)
    labels = np.repeat(np.arange(identities), images_per_identity)
    images = render_chunked(_take(ident, labels), view_params(views, prior), size)
    return images, labels, keys
