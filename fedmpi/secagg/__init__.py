"""Secure aggregation (SecAgg, Bonawitz et al. CCS'17; SecAgg+, Bell et al. CCS'20) as pure, MPI-free code: the
server learns only the sum of the participants' encoded vectors (docs/BASELINES.md, "Secure aggregation").

encoding.py  clip + fixed point, the modulus bits derived so that the true sum never wraps
keys.py      X25519 key agreement, HKDF-SHA256 derivation, the shares' AEAD (PyCA `cryptography`)
masks.py     the mask PRG: a ChaCha20 keystream read as uint32 / uint64 words
cores.py     the node's cores for the vector work: a thread pool over pieces of whole ChaCha20 blocks
shares.py    Shamir t-of-n over GF(2^521 - 1)
graph.py     who masks with whom: all (SecAgg) or a random k-regular Harary graph (SecAgg+)
participant.py, server.py  the four stages as state machines; simulate.py runs a round in one process
uploads.py   the glue to a run: its encoding, an upload's update, distributed DP's noise share
"""
from fedmpi.secagg.errors import ProtocolError

__all__ = ["ProtocolError"]
