"""Key agreement and derivation (PyCA `cryptography`): X25519, HKDF-SHA256, ChaCha20-Poly1305 for the shares.

Every derived key is bound to the session id (HKDF salt), its purpose and the ordered participant ids (HKDF info,
4-byte big-endian), so one Diffie-Hellman secret never feeds two uses and no key outlives its round (spec §2, §8.9).
"""
from __future__ import annotations

import hashlib
import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

LABEL = b"fedmpi-secagg-v1"
NONCE = 12


def ids(*values: int) -> bytes:
    return b"".join(int(v).to_bytes(4, "big") for v in values)


def new_private() -> X25519PrivateKey:
    return X25519PrivateKey.generate()


def private_bytes(key: X25519PrivateKey) -> bytes:
    return key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())


def public_bytes(key: X25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def private_from(raw: bytes) -> X25519PrivateKey:
    return X25519PrivateKey.from_private_bytes(raw)


def derive(secret: bytes, sid: bytes, purpose: str, *participants: int) -> bytes:
    """A 32-byte key: HKDF-SHA256(secret, salt = sid, info = label ‖ purpose ‖ ids)."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=sid,
                info=LABEL + b" " + purpose.encode() + ids(*participants)).derive(secret)


def pair_key(own: X25519PrivateKey, peer_public: bytes, sid: bytes, purpose: str, u: int, v: int) -> bytes:
    """The key u and v both derive from X25519(own, peer): the ids in increasing order."""
    shared = own.exchange(X25519PublicKey.from_public_bytes(peer_public))
    return derive(shared, sid, purpose, min(u, v), max(u, v))


def session_id(round_index: int, keys: dict[int, tuple[bytes, bytes]]) -> bytes:
    """SHA-256(label ‖ r ‖ for u in sorted order: u ‖ c_u^PK ‖ s_u^PK): binds the round and every key."""
    h = hashlib.sha256(LABEL)
    h.update(ids(round_index))
    for u in sorted(keys):
        h.update(ids(u) + keys[u][0] + keys[u][1])
    return h.digest()


def commitment(sid: bytes, u: int, seed: bytes) -> bytes:
    """SHA-256(sid ‖ u ‖ b_u): lets the server tell a reconstructed self-mask seed from a wrong one."""
    return hashlib.sha256(LABEL + b" seed" + sid + ids(u) + seed).digest()


def seal(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    nonce = secrets.token_bytes(NONCE)
    return nonce + ChaCha20Poly1305(key).encrypt(nonce, plaintext, aad)


def open_sealed(key: bytes, sealed: bytes, aad: bytes) -> bytes | None:
    """The plaintext, or None where the ciphertext or its associated data were altered."""
    try:
        return ChaCha20Poly1305(key).decrypt(sealed[:NONCE], sealed[NONCE:], aad)
    except (InvalidTag, ValueError):
        return None
