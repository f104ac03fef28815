"""The synthetic faces' renderer: one identity's parameters and one view's (fedmpi/data/synthetic.py draws them)
-> an image, painted layer by layer in numpy over a batch of images at once. Antialiased shapes from signed
distances; features are points on a head of revolution that move and foreshorten under yaw."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from fedmpi.data.synthetic_shapes import blur3, col, ellipse, paint, project, soft

HEAD_SCALE, HEAD_Y = 1.2, 0.08  # canonical head frame -> image: faces fill the crop as aligned 112x112 faces do

def render(ident: dict, view: dict, size: int) -> np.ndarray:
    """uint8 [B, 3, size, size] images; `ident` and `view` hold one row per image. Painted back to front, each
    layer over the last: background, hair behind the head and neck, face, moles, beard, front hair, eyes (brows,
    glasses), nose, mouth, wrinkles; then light, occlusions and the camera (colour cast, blur, noise)."""
    h = _head_frame(ident, view, size)
    img = _background(h, view)
    _paint_back_hair_and_neck(img, h, ident)
    _paint_face(img, h, ident)
    _paint_moles(img, h, ident)
    _paint_beard(img, h, ident)
    _paint_front_hair(img, h, ident)
    _paint_eyes(img, h, ident, view)
    _paint_nose(img, h, ident)
    _paint_mouth(img, h, ident, view)
    _age_wrinkles(img, h)
    _light(img, h, view)
    _paint_occlusion(img, h, view)
    return _camera(img, view, size)


def _head_frame(ident: dict, view: dict, size: int) -> SimpleNamespace:
    """The pixel grid in the image (x, y) and in the canonical head frame (u, v), the pixel size there, and the
    head's shape (a, b: half width and height, widened with age) under the view's yaw."""
    h = SimpleNamespace(n=len(view["yaw"]), size=size)
    g = (np.arange(size, dtype=np.float32) + 0.5) / size * 2 - 1
    h.x, h.y = g[None, None, :], g[:, None][None]
    # image -> canonical head frame: undo shift, roll and scale (head centre a little below the crop centre)
    scale = col(HEAD_SCALE * view["scale"])
    cr, sr = col(np.cos(view["roll"])), col(np.sin(view["roll"]))
    xs, ys = h.x - col(view["tx"]), h.y - col(HEAD_Y + view["ty"])
    h.u = (cr * xs + sr * ys) / scale
    h.v = (-sr * xs + cr * ys) / scale
    h.px = 2.0 / size / scale
    h.age = ident["age0"] + view["age"]
    h.yaw = view["yaw"]
    h.a = ident["a"] * (1 + 0.04 * np.clip(h.age, -1, 1))
    h.b = ident["b"]
    h.A, h.B = col(h.a), col(h.b)
    return h


def _feature(h, x0, y0):
    """Projected x and foreshortening of a frontal feature point, per image."""
    zero = np.zeros(h.n, np.float32)
    return project(x0 + zero, y0 + zero, h.a, h.b, h.yaw)


def _background(h, view) -> np.ndarray:
    bg = np.asarray(view["background"], np.float32)
    img = np.empty((h.n, 3, h.size, h.size), np.float32)
    img[:] = bg[:, :, None, None] * (1 + col(view["bg_grad"])[:, None] * h.y[:, None])
    return img


def _paint_back_hair_and_neck(img, h, ident) -> None:
    h.hair = ident["hair"] + np.clip(h.age, 0, 1)[:, None] * (np.array([0.7, 0.7, 0.7], np.float32) - ident["hair"])
    h.has_hair = ~ident["bald"]
    a, b = h.a, h.b
    # hair behind the head: seen more on the far side as the head turns
    h.back = ellipse(h.u, h.v, col(-0.22 * a * np.sin(h.yaw)), col(-0.12 * b - 0.02 * ident["hair_len"]),
                      col(a * (1.10 + 0.12 * ident["hair_len"])), col(b * (0.92 + 0.35 * ident["hair_len"])), h.px)
    paint(img, h.back * col(h.has_hair), h.hair)
    neck = soft(np.maximum(np.abs(h.u) - 0.55 * h.A, 0.3 * h.B - h.v), h.px)
    paint(img, neck, ident["skin"] * 0.82)


def _paint_face(img, h, ident) -> None:
    """An ellipse above the eyes' line, a superellipse (jaw) below, with a skin texture."""
    u, v, A, B = h.u, h.v, h.A, h.B
    n_exp = np.where(v > 0, col(ident["jaw"]), 2.0)
    rho = (np.abs(u / A) ** n_exp + np.abs(v / B) ** n_exp) ** (1.0 / n_exp)
    h.face = soft((rho - 1.0) * np.minimum(A, B), h.px)
    h.skin = ident["skin"] * (1 - 0.06 * np.clip(h.age, 0, 1))[:, None]
    centre_x, _ = project(np.zeros(h.n), np.zeros(h.n), h.a, h.b, h.yaw)
    h.uc = u - col(centre_x)  # horizontal position relative to the turned face's midline
    texture = 1 + col(ident["tex_amp"]) * np.sin(col(ident["tex_f"][:, 0]) * h.uc + col(ident["tex_f"][:, 1]) * v
                                                  + col(ident["tex_phase"]))
    paint(img, h.face, h.skin[:, :, None, None] * texture[:, None])


def _paint_moles(img, h, ident) -> None:
    """Identity marks on the skin."""
    for k in range(2):
        mx, mf = _feature(h, ident["mole_xy"][:, k, 0] * h.a, ident["mole_xy"][:, k, 1] * h.b)
        mole = ellipse(h.u, h.v, col(mx), col(ident["mole_xy"][:, k, 1] * h.b), col(0.028 * mf), 0.028, h.px)
        paint(img, mole * h.face * col(ident["moles"][:, k] & (mf > 0.3)), h.skin * 0.45)


def _paint_beard(img, h, ident) -> None:
    """Beard and moustache below the nose."""
    u, v = h.u, h.v
    h.nose_tip = ident["eye_y"] + ident["nose_len"]
    mouth_x, _ = _feature(h, 0.0, ident["mouth_y"])
    below_mouth = (v - col(ident["mouth_y"])) / 0.05
    chin = (np.clip(below_mouth / 1.2 + 0.33, 0, 1)
            * np.clip((np.abs(h.uc) - 0.55 * h.A) / (0.1 * h.A) + below_mouth, 0, 1))
    moustache = soft(np.maximum(np.abs(v - col((h.nose_tip + ident["mouth_y"]) / 2 + 0.005)) - 0.025,
                                 np.abs(u - col(mouth_x)) - col(ident["mouth_w"] * 1.1)), h.px)
    beard = h.face * np.maximum(chin, moustache) * col(ident["beard"])
    paint(img, beard, h.hair * 0.9)


def _paint_front_hair(img, h, ident) -> None:
    """Hair over the forehead, with fringe around the parting and longer sides."""
    uc, A = h.uc, h.A
    fringe = np.clip(1 - ((uc - col(ident["part"] * h.a)) / (0.7 * A)) ** 2, 0, 1)
    sides = np.clip(np.abs(uc) / A, 0, 1) ** 4
    hl = col(ident["hairline"]) + col(ident["fringe"]) * fringe + col(0.1 + 0.3 * ident["hair_len"]) * sides
    h.hl = np.where(np.abs(uc) < 0.75 * A, np.minimum(hl, col(ident["eye_y"] - 0.1)), hl)  # eyes stay free
    front = np.maximum(h.face, h.back) * soft(h.v - h.hl, h.px) * col(h.has_hair)
    paint(img, front, h.hair)


def _paint_eyes(img, h, ident, view) -> None:
    """Eyes (white, iris, pupil), brows and glasses."""
    u, v, px, n, face = h.u, h.v, h.px, h.n, h.face
    eye_y = h.eye_y = ident["eye_y"]
    h.brow_y = eye_y - ident["brow_gap"] - view["brow_raise"]
    for side in (-1.0, 1.0):
        ex, ef = _feature(h, side * ident["eye_dx"], eye_y)
        visible = col(ef > 0.12)
        ew, eh = ident["eye_w"] * ef, ident["eye_h"] * view["eye_open"] * (1 - 0.15 * np.clip(h.age, 0, 1))
        white = ellipse(u, v, col(ex), col(eye_y), col(ew), col(eh), px) * face * visible
        paint(img, white, np.full((n, 3), 0.93, np.float32))
        iris_x = ex + view["gaze"] * 0.3 * ew
        iris = np.minimum(ellipse(u, v, col(iris_x), col(eye_y), col(ident["eye_h"] * ef * 0.95),
                                   col(ident["eye_h"] * 0.95), px), white)
        paint(img, iris, ident["iris"])
        pupil = np.minimum(ellipse(u, v, col(iris_x), col(eye_y), col(ident["eye_h"] * ef * 0.45),
                                    col(ident["eye_h"] * 0.45), px), white)
        paint(img, pupil, np.full((n, 3), 0.03, np.float32))
        bx, bf = _feature(h, side * ident["eye_dx"] * 1.05, h.brow_y)
        slant = col(side * ident["brow_slant"])
        du, dv = u - col(bx), v - col(h.brow_y)
        brow = ellipse(du, dv + slant * du, 0.0, 0.0, col(ident["eye_w"] * 1.35 * bf),
                        col(ident["brow_thick"]), px) * face * col(bf > 0.12)
        paint(img, brow, h.hair * 0.8)
        if ident["glasses"].any():
            gr = ident["eye_w"] * ident["glasses_r"]
            rim = ellipse(u, v, col(ex), col(eye_y), col(gr * ef), col(gr * 0.8), px)
            ring = np.minimum(rim, 1 - ellipse(u, v, col(ex), col(eye_y), col(gr * ef - 0.022),
                                                col(gr * 0.8 - 0.022), px))
            paint(img, ring * col(ident["glasses"] & (ef > 0.12)), np.full((n, 3), 0.08, np.float32))
    if ident["glasses"].any():
        lx, _ = _feature(h, -ident["eye_dx"] + ident["eye_w"] * ident["glasses_r"], eye_y)
        rx, _ = _feature(h, ident["eye_dx"] - ident["eye_w"] * ident["glasses_r"], eye_y)
        bridge = soft(np.maximum(np.abs(v - col(eye_y - 0.02)) - 0.012,
                                  np.abs(u - col((lx + rx) / 2)) - col(np.abs(rx - lx) / 2)), px)
        paint(img, bridge * col(ident["glasses"]), np.full((n, 3), 0.08, np.float32))


def _paint_nose(img, h, ident) -> None:
    """A shadow along its side and two nostrils; it sticks out, so it moves further under yaw."""
    u, v, px, yaw, nose_tip = h.u, h.v, h.px, h.yaw, h.nose_tip
    nose_x, _ = _feature(h, np.zeros(h.n), nose_tip)
    nose_x = nose_x + 0.08 * np.sin(yaw)
    side = np.where(yaw >= 0, -1.0, 1.0)
    ridge = ellipse(u, v, col(nose_x + side * ident["nose_w"] * 0.6), col(ident["eye_y"] + 0.55 * ident["nose_len"]),
                     col(0.022 + 0.02 * np.abs(np.sin(yaw))), col(0.5 * ident["nose_len"]), px) * h.face
    paint(img, ridge, h.skin * 0.72)
    for s in (-1.0, 1.0):
        nx, nf = _feature(h, s * ident["nose_w"] * 0.5, nose_tip)
        nostril = ellipse(u, v, col(nx + 0.08 * np.sin(yaw)), col(nose_tip), col(0.022 * nf + 1e-3), 0.014, px)
        paint(img, nostril * h.face * col(nf > 0.2), h.skin * 0.4)


def _paint_mouth(img, h, ident, view) -> None:
    """Lips along a parabola bent by the smile, dark inside when open."""
    u, v, px, face = h.u, h.v, h.px, h.face
    mouth_y = ident["mouth_y"] + 0.02 * np.clip(h.age, 0, 1)
    mx, mf = _feature(h, np.zeros(h.n), mouth_y)
    half_w = ident["mouth_w"] * np.maximum(mf, 0.2)
    t = np.clip((u - col(mx)) / col(half_w), -1.5, 1.5)
    centre = col(mouth_y) - col(0.05 * view["smile"]) * (1 - t ** 2)
    inside_w = np.clip(1 - t ** 2, 0, 1)
    gap = col(view["mouth_open"] * 0.045)
    lips = soft(np.abs(v - centre) - (col(ident["lip_h"]) + gap) * np.sqrt(inside_w), px) * (np.abs(t) < 1) * face
    paint(img, lips, ident["lip"])
    opening = soft(np.abs(v - centre) - gap * np.sqrt(inside_w), px) * (np.abs(t) < 0.9) * face * (gap > 0)
    paint(img, opening, np.full((h.n, 3), 0.12, np.float32))


def _age_wrinkles(img, h) -> None:
    """Lines on the forehead with age."""
    v = h.v
    wr = (h.face * col(np.clip(h.age, 0, 1) * 0.5) * (np.sin(v * 70.0) > 0.7) * (v < col(h.brow_y - 0.05))
          * (v > h.hl + 0.03))
    img *= 1 - 0.25 * wr[:, None]


def _light(img, h, view) -> None:
    """Light on the head's normals, then a global gradient and brightness."""
    head = np.maximum(h.face, h.back * col(h.has_hair))
    nx_, ny_ = np.clip(h.uc / h.A, -1, 1), np.clip(h.v / h.B, -1, 1)
    nz_ = np.sqrt(np.clip(1 - nx_ ** 2 - ny_ ** 2, 0, 1))
    el, az = view["light_el"], view["light_az"]
    lx, ly, lz = np.sin(el) * np.cos(az), np.sin(el) * np.sin(az), np.cos(el)
    shade = np.clip(col(lx) * nx_ + col(ly) * ny_ + col(lz) * nz_, 0, 1)
    img *= (1 + head * col(view["light"]) * (shade - 0.7))[:, None]
    ga = view["grad_az"]
    img *= (col(view["bright"]) * (1 + col(view["grad"]) * (col(np.cos(ga)) * h.x + col(np.sin(ga)) * h.y)))[:, None]


def _paint_occlusion(img, h, view) -> None:
    """1 a patch, 2 sunglasses, 3 a mask over the lower face."""
    occ = view["occlusion"]
    if not occ.any():
        return
    x, y, pixel = h.x, h.y, 2.0 / h.size
    ox, oy, ow, oh = (view["occ_xywh"][:, i] for i in range(4))
    patch = soft(np.maximum(np.abs(x - col(ox)) - col(ow), np.abs(y - col(oy)) - col(oh)), pixel)
    paint(img, patch * col(occ == 1), view["occ_rgb"])
    eye_img_y = HEAD_Y + view["ty"] + HEAD_SCALE * view["scale"] * h.eye_y
    band = soft(np.abs(y - col(eye_img_y)) - col(0.07 * view["scale"]), pixel) * (np.abs(x) < 0.75)
    paint(img, band * col(occ == 2), 0.1 * view["occ_rgb"])
    mask_top = HEAD_Y + view["ty"] + HEAD_SCALE * view["scale"] * (h.nose_tip - 0.03)
    lower = h.face * soft(col(mask_top) - y, pixel)
    paint(img, lower * col(occ == 3), 0.75 + 0.25 * view["occ_rgb"])


def _camera(img, view, size: int) -> np.ndarray:
    """The colour cast, blur and sensor noise; uint8 out."""
    img *= view["cast"][:, :, None, None]
    if (view["blur"] > 0).any():
        w = col(np.clip(view["blur"], 0, 1))[:, None]
        soft = blur3(img)
        img = img + w * (soft - img)
        img = img + np.clip(w - 0.5, 0, 1) * (blur3(img) - img)
    noise = np.stack([np.random.default_rng(int(s)).standard_normal((3, size, size), dtype=np.float32)
                      for s in view["noise_seed"]])
    img += col(view["noise"])[:, None] * noise
    return (np.clip(img, 0, 1) * 255 + 0.5).astype(np.uint8)
