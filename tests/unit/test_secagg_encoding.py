"""The fixed point of secure aggregation (fedmpi/secagg/encoding.py) and its primitives' known answers: exact
encodings of known inputs, the modulus bits derived from participants and levels (and a setting that could wrap
refused in one line), the mask PRG's test vector and the worked 3-party example of the specification (§7 O6, O7)."""
import hashlib
import os

import numpy as np
import pytest

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from fedmpi.errors import ConfigError
from fedmpi.secagg import cores, keys, masks
from fedmpi.secagg.encoding import Encoding

T = 1 << 22


def test_known_encodings_and_saturation():
    enc = Encoding(8.0, 22, 3)
    words = enc.encode(np.array([0.0, 8.0, -8.0, 9.0, -100.0, 1.0]))
    assert words.dtype == np.uint32
    assert words.tolist() == [T, 0, T // 2, enc.modulus - T // 2, T // 2, enc.modulus - T // 2, T // 16]
    assert enc.clipped == 2                    # 9.0 and -100.0: the leader's note counts them


@pytest.mark.parametrize("n, bits, dtype", [(1, 23, np.uint32), (3, 24, np.uint32), (1000, 32, np.uint32),
                                            (1024, 33, np.uint64), (10_000, 36, np.uint64)])
def test_bits_are_derived_so_the_sum_cannot_wrap(n, bits, dtype):
    enc = Encoding(8.0, 22, n)
    assert (enc.bits, enc.dtype) == (bits, np.dtype(dtype))
    assert n * T <= enc.modulus - 1 < 2 * n * T


def test_worst_case_sum_decodes_exactly():
    n = 1000
    enc = Encoding(8.0, 22, n)
    for value in (8.0, -8.0):
        one = enc.encode(np.full(5, value))
        total = (one.astype(np.uint64) * n % enc.modulus).astype(enc.dtype)
        summed, weight = enc.decode(total, n)
        assert weight == n and summed.tolist() == [value * n] * 5


@pytest.mark.parametrize("kwargs, message", [
    (dict(clipping_range=0.0), "fed.secure_aggregation.clipping_range must be a positive number, got 0.0"),
    (dict(clipping_range=-1.0), "fed.secure_aggregation.clipping_range must be a positive number, got -1.0"),
    (dict(quantization_bits=60), "fed.secure_aggregation.quantization_bits must be an integer in [1, 52], got 60"),
    (dict(quantization_bits=52, participants=5000),
     "fed.secure_aggregation: 5000 participants x 2^52 levels need 65-bit sums, more than 64 could hold "
     "without wrapping; lower fed.secure_aggregation.quantization_bits"),
])
def test_a_setting_that_could_wrap_or_is_meaningless_is_refused(kwargs, message):
    args = dict(clipping_range=8.0, quantization_bits=22, participants=3) | kwargs
    with pytest.raises(ConfigError) as e:
        Encoding(**args)
    assert str(e.value) == message


def test_weight_outside_unit_interval_and_too_many_summands_refused():
    enc = Encoding(8.0, 22, 2)
    with pytest.raises(ValueError, match=r"weight must lie in \[0, 1\].*got 1.5"):
        enc.encode(np.zeros(3), weight=1.5)
    with pytest.raises(ValueError, match="3 inputs summed in a ring sized for 2"):
        enc.decode(np.zeros(4, dtype=np.uint32), 3)


def test_weighted_mean_within_the_stated_bound():
    rng = np.random.default_rng(4)
    enc = Encoding(1.0, 16, 4)
    xs, ws = rng.uniform(-1, 1, size=(4, 2000)), [1.0, 0.5, 0.25, 0.8]
    total = sum(enc.encode(x, w, rng).astype(np.uint64) for x, w in zip(xs, ws)) % enc.modulus
    summed, weight = enc.decode(total.astype(enc.dtype), 4)
    wq = np.array([enc.weight_levels(w) / enc.levels for w in ws])
    assert weight == wq.sum()
    exact = (wq[:, None] * xs).sum(0) / wq.sum()
    error = np.abs(summed / weight - exact)
    assert error.max() <= enc.error_bound(4, weight)
    assert abs(error.mean()) < enc.step        # stochastic rounding: unbiased, the errors cancel on average


def test_prg_test_vector():
    assert masks.prg(bytes(32), 4, 32).tolist() == [2917185654, 2419978656, 3848953152, 683509331]
    assert masks.prg(bytes(32), 4, 16).tolist() == [w & 0xFFFF for w in [2917185654, 2419978656, 3848953152, 683509331]]


@pytest.mark.parametrize("dtype, bits", [(np.uint32, 26), (np.uint64, 40)])
def test_masks_on_the_nodes_cores_are_the_one_keystreams_words(dtype, bits):
    """A vector of 2.5 pieces masked by three streams on 1 and on 3 threads: bit for bit the same, and the same as
    the streams' keystreams read whole from block 0 (each piece starts its stream at its own block counter)."""
    size = 2 * cores.PIECE + cores.PIECE // 2 + 7
    start = np.random.default_rng(0).integers(0, 1 << bits, size, dtype=np.uint64).astype(dtype)
    streams = [(bytes([k]) * 32, sign) for k, sign in ((1, 1), (2, -1), (3, 1))]
    expected = start.astype(np.uint64)
    for key, sign in streams:
        whole = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor().update(bytes(start.nbytes))
        words = np.frombuffer(whole, dtype=dtype).astype(np.uint64)
        expected = expected + words if sign > 0 else expected - words      # wraps mod 2^64, which 2^bits divides
    expected = (expected & np.uint64((1 << bits) - 1)).astype(dtype)
    try:
        for count in (1, 3):
            cores.set_threads(count)
            assert np.array_equal(masks.apply_all(start.copy(), streams, bits), expected)
    finally:
        cores.set_threads(len(os.sched_getaffinity(0)))


def test_the_encoding_on_the_nodes_cores_reads_the_rounding_stream_in_order():
    """2.5 pieces encoded and decoded on 1 and on 3 threads: the same words, the same clipped count, the same
    decoded values (the stochastic rounding's uniforms are drawn piece by piece on the calling thread)."""
    x = np.random.default_rng(1).standard_normal(2 * cores.PIECE + cores.PIECE // 2 + 3) * 3
    enc, results = Encoding(8.0, 22, 12), []
    try:
        for count in (1, 3):
            cores.set_threads(count)
            words = enc.encode(x, 0.7, np.random.default_rng(5))
            results.append((words, enc.clipped, enc.decode(words, 1)[0]))
    finally:
        cores.set_threads(len(os.sched_getaffinity(0)))
    (w1, c1, d1), (w3, c3, d3) = results
    assert np.array_equal(w1, w3) and c1 == c3 > 0 and np.array_equal(d1, d3)


def test_worked_example_of_three_parties():
    """Spec §7 O7: fixed test keys, R = 2^16, m = 4, + for u < v."""
    sk = {u: keys.private_from(hashlib.sha256(b"fedmpi-secagg-example|s" + str(u).encode()).digest()) for u in (1, 2, 3)}
    seed = {u: hashlib.sha256(b"fedmpi-secagg-example|b" + str(u).encode()).digest() for u in (1, 2, 3)}
    sid = hashlib.sha256(b"fedmpi-secagg-example session").digest()

    def pair(u, v):
        return masks.prg(keys.pair_key(sk[u], keys.public_bytes(sk[v]), sid, "pair", u, v), 4, 16)

    assert pair(1, 2).tolist() == pair(2, 1).tolist() == [25536, 29935, 31392, 10259]
    assert pair(1, 3).tolist() == [59941, 54065, 55069, 5874]
    assert pair(2, 3).tolist() == [23368, 30698, 44063, 2847]
    own = {u: masks.prg(keys.derive(seed[u], sid, "self", u), 4, 16) for u in (1, 2, 3)}
    assert [own[u].tolist() for u in (1, 2, 3)] == [[6853, 22285, 30456, 26839], [39184, 17734, 50739, 4831],
                                                    [41068, 52670, 46706, 41436]]
    x = {1: [1, 2, 3, 4], 2: [10, 20, 30, 40], 3: [100, 200, 300, 400]}
    y = {1: np.array(x[1]) + own[1] + pair(1, 2) + pair(1, 3), 2: np.array(x[2]) + own[2] - pair(1, 2) + pair(2, 3),
         3: np.array(x[3]) + own[3] - pair(1, 3) - pair(2, 3)}
    y = {u: v.astype(np.int64) % (1 << 16) for u, v in y.items()}
    assert [y[u].tolist() for u in (1, 2, 3)] == [[26795, 40751, 51384, 42976], [37026, 18517, 63440, 62995],
                                                  [23395, 33643, 13410, 33115]]
    assert (sum(y.values()) % (1 << 16)).tolist() == [21680, 27375, 62698, 8014]
    assert ((sum(y.values()) - sum(own.values())) % (1 << 16)).tolist() == [111, 222, 333, 444]
    two = (y[1] + y[2]) % (1 << 16)
    assert two.tolist() == [63821, 59268, 49288, 40435]
    assert ((two - own[1] - own[2] - pair(1, 3) - pair(2, 3)) % (1 << 16)).tolist() == [11, 22, 33, 44]
