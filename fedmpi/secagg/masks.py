"""The mask PRG, identical on every side: PRG(key, m, b) = the first m words of the ChaCha20 keystream under
`key` (zero nonce: every key is single-use, HKDF-bound to its session and purpose), little-endian uint32 words for
b <= 32, uint64 words for b > 32, each reduced mod 2^b (spec §4.5). Applied piece by piece into the vector it
masks, so a 43.6 M-entry vector needs no second copy of its size; the pieces run on the node's cores (cores.py):
a piece starting at word s reads the keystream from its 64-byte block s·w / 64 (ChaCha20's block counter, the
first 4 bytes of PyCA's 16-byte nonce, little-endian), so every piece's words are those of the one stream."""
from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from fedmpi.secagg.cores import over_pieces

BLOCK = 1 << 16          # words per keystream call within a piece (256 kB of uint32: the piece stays in cache
                         # while every stream is added into it)
_NONCE = bytes(12)


def _stream(key: bytes, first_block: int = 0):
    return Cipher(algorithms.ChaCha20(key, first_block.to_bytes(4, "little") + _NONCE), mode=None).encryptor()


def apply_all(out: np.ndarray, streams: list[tuple[bytes, int]], bits: int) -> np.ndarray:
    """out += Σ sign · PRG(key, len(out), bits) mod 2^bits over streams = [(key, sign)], in place (out: uint32 or
    uint64 words); the words wrap mod 2^32 / 2^64, which 2^bits divides, and are reduced once at the end."""
    words = out.dtype
    little = words.newbyteorder("<")
    modulus_mask = words.type((1 << bits) - 1)
    zeros = bytes(min(BLOCK, out.size) * words.itemsize)

    def piece(start: int, stop: int) -> None:
        ciphers = [(_stream(key, start * words.itemsize // 64), sign) for key, sign in streams]
        for s in range(start, stop, BLOCK):
            part = out[s:min(s + BLOCK, stop)]
            plain = zeros if part.nbytes == len(zeros) else zeros[:part.nbytes]
            for cipher, sign in ciphers:
                mask = np.frombuffer(cipher.update(plain), dtype=little)
                (np.add if sign > 0 else np.subtract)(part, mask, out=part)
            if bits < 8 * words.itemsize:
                np.bitwise_and(part, modulus_mask, out=part)

    over_pieces(out.size, piece)
    return out


def apply(out: np.ndarray, key: bytes, bits: int, sign: int = 1) -> np.ndarray:
    """out += sign * PRG(key, len(out), bits) mod 2^bits, in place (out: uint32 or uint64 words)."""
    return apply_all(out, [(key, sign)], bits)


def prg(key: bytes, m: int, bits: int) -> np.ndarray:
    """PRG(key, m, bits) itself (tests, the worked example)."""
    return apply(np.zeros(m, dtype=np.uint32 if bits <= 32 else np.uint64), key, bits)
