"""Clip + fixed point into Z_R, R = 2^b, with b derived so that the true sum of any n inputs never wraps.

An entry x becomes e = stochround(clip(x, -c, c) * T / (2c)) in [-T/2, T/2] (centred two's complement, stored
mod R); a participant's vector is [q_w | e(w_q * x)] with q_w = round(w T) and w_q = q_w / T its weight in [0, 1]
(Flower's [w, w * params], the weight entry unsigned in [0, T]). For n participants every entry of the sum lies in
[-nT/2, nT/2] and the weight entry in [0, nT]: both fit when R >= nT + 1, so b = ceil(log2(nT + 1)) (spec §4.3).
b <= 32: uint32 words; 32 < b <= 64: uint64. Decoding maps the sum back to (-R/2, R/2] and multiplies by 2c/T.
"""
from __future__ import annotations

import math

import numpy as np

from fedmpi.errors import ConfigError
from fedmpi.secagg.cores import over_pieces

MAX_QUANTIZATION_BITS = 52   # T * |x| / 2c must be exact in a float64 (53-bit significand)


class Encoding:
    """The fixed point shared by every participant and the server of a session. `setting` names the config key
    a refusal points at."""

    def __init__(self, clipping_range: float, quantization_bits: int, participants: int,
                 setting: str = "fed.secure_aggregation"):
        c = float(clipping_range)
        if not (math.isfinite(c) and c > 0):
            raise ConfigError(f"{setting}.clipping_range must be a positive number, got {clipping_range!r}")
        if not (isinstance(quantization_bits, int) and 1 <= quantization_bits <= MAX_QUANTIZATION_BITS):
            raise ConfigError(f"{setting}.quantization_bits must be an integer in [1, {MAX_QUANTIZATION_BITS}], "
                              f"got {quantization_bits!r}")
        if participants < 1:
            raise ConfigError(f"{setting}: at least one participant is needed, got {participants}")
        self.clip, self.levels, self.participants = c, 1 << quantization_bits, int(participants)
        self.bits = (self.participants * self.levels).bit_length()    # ceil(log2(n T + 1))
        if self.bits > 64:
            raise ConfigError(f"{setting}: {participants} participants x 2^{quantization_bits} levels need "
                              f"{self.bits}-bit sums, more than 64 could hold without wrapping; lower "
                              f"{setting}.quantization_bits")
        self.modulus = 1 << self.bits
        self.dtype = np.dtype(np.uint32 if self.bits <= 32 else np.uint64)

    @property
    def step(self) -> float:
        """Δ = 2c / T, one level of the fixed point."""
        return 2 * self.clip / self.levels

    def weight_levels(self, weight: float) -> int:
        """q_w = round(w T) for a weight in [0, 1]; w_q = q_w / T is the weight the sum then carries."""
        if not (0.0 <= weight <= 1.0):
            raise ValueError(f"a participant's weight must lie in [0, 1] (its share of the largest), got {weight}")
        return int(round(weight * self.levels))

    def encode(self, x: np.ndarray, weight: float = 1.0, rng: np.random.Generator | None = None) -> np.ndarray:
        """[q_w | e(w_q x)] as self.dtype, m + 1 entries. Stochastic rounding floor(a + u), u ~ U[0, 1) (unbiased:
        up with probability frac(a)) draws from `rng`, which need not be secret; None rounds to nearest.
        `clipped` then counts the entries of w_q x beyond [-c, c]."""
        x = np.asarray(x).reshape(-1)
        q = self.weight_levels(weight)
        out = np.empty(x.size + 1, dtype=self.dtype)
        out[0] = q
        body = out[1:]

        def noise(a: int, b: int) -> np.ndarray:          # 2^-24 resolution: a bias below 2^-24 of a step
            return rng.random(b - a, dtype=np.float32)

        def piece(a: int, b: int, u: np.ndarray | None = None) -> int:
            values = np.multiply(x[a:b], q / self.levels)
            clipped = int(np.count_nonzero(np.abs(values) > self.clip))
            np.clip(values, -self.clip, self.clip, out=values)
            values *= self.levels / (2 * self.clip)
            if u is not None:
                values += u
                np.floor(values, out=values)
            else:
                np.rint(values, out=values)
            body[a:b] = self._to_ring(values.astype(np.int64))
            return clipped

        self.clipped = sum(over_pieces(x.size, piece, None if rng is None else noise))
        return out

    def _to_ring(self, e: np.ndarray) -> np.ndarray:
        """Signed integers -> their residues mod R in this encoding's words (the cast wraps mod the word size,
        which R divides)."""
        words = e.astype(self.dtype) if self.dtype == np.uint32 else e.view(np.uint64)
        return words & self.dtype.type(self.modulus - 1)

    def check_sum_fits(self, count: int) -> None:
        if count > self.participants:
            raise ValueError(f"{count} inputs summed in a ring sized for {self.participants}: the sum could wrap")

    def decode(self, total: np.ndarray, count: int, out: np.ndarray | None = None) -> tuple[np.ndarray, float]:
        """(Σ w_q x, Σ w_q) from the sum of `count` encoded vectors; `out` (float64 unless given) receives the
        first. The residues are centred to (-R/2, R/2] by shifting the modulus' top bit to the word's sign bit."""
        self.check_sum_fits(count)
        weight = int(total[0]) / self.levels
        body = total[1:]
        out = np.empty(body.size) if out is None else out
        shift = 8 * self.dtype.itemsize - self.bits
        signed = np.int32 if self.dtype == np.uint32 else np.int64

        def piece(a: int, b: int) -> None:
            np.multiply((body[a:b] << self.dtype.type(shift)).view(signed) >> shift, self.step, out=out[a:b])

        over_pieces(body.size, piece)
        return out, weight

    def error_bound(self, count: int, weight_sum: float) -> float:
        """|decoded mean - Σ w_q x_clipped / Σ w_q| per entry: each input's rounding is below one step Δ."""
        return count * self.step / weight_sum
