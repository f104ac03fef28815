"""Shamir t-of-n secret sharing of 32-byte secrets over the prime field GF(p), p = 2^521 - 1 (a Mersenne prime).

Plain polynomial arithmetic on Python's exact integers, no cipher: one share per 32-byte secret (PyCryptodome's
Shamir shares 16-byte secrets over GF(2^128), so each seed would need two sharings and a new dependency). The
coefficients come from `secrets` (OS entropy). A share for participant v is the polynomial at x = v (never 0: the
secret sits at x = 0); t shares determine the polynomial, t - 1 reveal nothing (spec §2 R1, §7 O4).
"""
from __future__ import annotations

import secrets

PRIME = (1 << 521) - 1
SHARE_BYTES = 66            # ceil(521 / 8)
SECRET_BYTES = 32


def split(secret: bytes, threshold: int, holders: list[int]) -> dict[int, bytes]:
    """{v: share of `secret` for holder v}; any `threshold` of them reconstruct it."""
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"a shared secret has {SECRET_BYTES} bytes, got {len(secret)}")
    if threshold < 2 or threshold > len(holders):
        raise ValueError(f"threshold {threshold} must lie in [2, {len(holders)} holders]")
    if any(v <= 0 or v >= PRIME for v in holders) or len(set(holders)) != len(holders):
        raise ValueError(f"share holders must be distinct positive ids, got {sorted(holders)}")
    coefficients = [int.from_bytes(secret, "big")] + [secrets.randbelow(PRIME) for _ in range(threshold - 1)]
    return {v: _evaluate(coefficients, v).to_bytes(SHARE_BYTES, "big") for v in holders}


def _evaluate(coefficients: list[int], x: int) -> int:
    y = 0
    for a in reversed(coefficients):
        y = (y * x + a) % PRIME
    return y


def interpolate(shares: dict[int, bytes], at: int = 0) -> int:
    """The polynomial through the given points (x = holder id), evaluated at `at` (Lagrange)."""
    points = [(x, int.from_bytes(s, "big")) for x, s in shares.items()]
    total = 0
    for i, (xi, yi) in enumerate(points):
        num, den = 1, 1
        for j, (xj, _) in enumerate(points):
            if j != i:
                num = num * (at - xj) % PRIME
                den = den * (xi - xj) % PRIME
        total = (total + yi * num * pow(den, -1, PRIME)) % PRIME
    return total


def combine(shares: dict[int, bytes], threshold: int) -> bytes | None:
    """The secret from the first `threshold` shares, or None where they do not make a 32-byte secret."""
    if len(shares) < threshold:
        raise ValueError(f"{len(shares)} shares given, {threshold} needed")
    if any(len(s) != SHARE_BYTES for s in shares.values()):
        return None
    chosen = dict(sorted(shares.items())[:threshold])
    value = interpolate(chosen)
    return value.to_bytes(SECRET_BYTES, "big") if value < 1 << (8 * SECRET_BYTES) else None


def off_polynomial(shares: dict[int, bytes], trusted: dict[int, bytes]) -> list[int]:
    """The holders whose share does not lie on the polynomial through `trusted` (threshold shares)."""
    return sorted(x for x, s in shares.items()
                  if x not in trusted and (len(s) != SHARE_BYTES or interpolate(trusted, x) != int.from_bytes(s, "big")))
