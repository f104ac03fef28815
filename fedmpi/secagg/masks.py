"""The mask PRG, identical on every side: PRG(key, m, b) = the first m words of the ChaCha20 keystream under
`key` (zero nonce: every key is single-use, HKDF-bound to its session and purpose), little-endian uint32 words for
b <= 32, uint64 words for b > 32, each reduced mod 2^b (spec §4.5). Applied in blocks into the vector it masks,
so a 43.6 M-entry vector needs no second copy of its size."""
from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

BLOCK = 1 << 20          # words per keystream piece (4 MB of uint32)
_NONCE = bytes(16)


def _stream(key: bytes):
    return Cipher(algorithms.ChaCha20(key, _NONCE), mode=None).encryptor()


def apply(out: np.ndarray, key: bytes, bits: int, sign: int = 1) -> np.ndarray:
    """out += sign * PRG(key, len(out), bits) mod 2^bits, in place (out: uint32 or uint64 words)."""
    stream = _stream(key)
    words = out.dtype
    zeros = bytes(min(BLOCK, out.size) * words.itemsize)
    modulus_mask = words.type((1 << bits) - 1)
    for s in range(0, out.size, BLOCK):
        piece = out[s:s + BLOCK]
        plain = zeros if piece.nbytes == len(zeros) else zeros[:piece.nbytes]
        mask = np.frombuffer(stream.update(plain), dtype=words.newbyteorder("<"))
        if sign > 0:
            np.add(piece, mask, out=piece)
        else:
            np.subtract(piece, mask, out=piece)
        if bits < 8 * words.itemsize:
            np.bitwise_and(piece, modulus_mask, out=piece)
    return out


def prg(key: bytes, m: int, bits: int) -> np.ndarray:
    """PRG(key, m, bits) itself (tests, the worked example)."""
    return apply(np.zeros(m, dtype=np.uint32 if bits <= 32 else np.uint64), key, bits)
