"""What the server receives from one participant under SecAgg (spec §7 O5): a coordinate of its masked vector,
over many sessions of fresh keys, is uniform (chi-square over its low byte), its distribution does not depend on
the input, and with everything else fixed the vector changes when only the participant's key changes. The keys
and seeds come from a seeded generator here (the protocol draws them from OS entropy), so the test is exact."""
import random

import numpy as np
import pytest
from scipy import stats

from fedmpi.secagg import keys, participant, shares
from fedmpi.secagg.participant import Participant
from fedmpi.secagg.server import Session

SESSIONS, M = 2500, 8          # 20 000 bytes over 256 cells: ~78 expected per cell


@pytest.fixture
def seeded(monkeypatch):
    """Every random draw of the protocol from one seeded generator (`reseed` restarts it)."""
    box = {}

    def reseed(seed):
        box["rng"] = random.Random(seed)
    reseed(0)
    token = lambda n: box["rng"].randbytes(n)                     # noqa: E731
    monkeypatch.setattr(participant.secrets, "token_bytes", token)
    monkeypatch.setattr(keys.secrets, "token_bytes", token)
    monkeypatch.setattr(shares.secrets, "randbelow", lambda p: box["rng"].randrange(p))
    monkeypatch.setattr(keys, "new_private", lambda: keys.private_from(token(32)))
    return reseed


def masked_vector(x):
    """Participant 1's masked vector in a fresh 3-party SecAgg session, as the server receives it."""
    session = Session(0, [1, 2, 3], 2, 32, M)
    people = {u: Participant(u, 32) for u in (1, 2, 3)}
    sid, peers = session.receive_keys({u: p.advertise() for u, p in people.items()})
    routed = session.route_shares({u: p.share_keys(sid, 2, peers[u]) for u, p in people.items()})
    return people[1].masked_input(routed[1], x)


def low_bytes(x):
    return np.concatenate([masked_vector(x) & 0xFF for _ in range(SESSIONS)])


def test_one_participants_masked_vector_is_uniform_and_independent_of_its_input(seeded):
    zero = low_bytes(np.zeros(M, dtype=np.uint32))
    counts = np.bincount(zero, minlength=256)
    assert stats.chisquare(counts).pvalue > 1e-3
    other = low_bytes(np.full(M, 200, dtype=np.uint32))
    table = np.stack([counts, np.bincount(other, minlength=256)])
    assert stats.chi2_contingency(table).pvalue > 1e-3
    plain = np.bincount(np.full(SESSIONS * M, 200) & 0xFF, minlength=256)   # the test can fail: unmasked input
    assert stats.chi2_contingency(np.stack([counts, plain + 1])).pvalue < 1e-10


def test_only_the_key_changes_and_the_vector_changes(seeded, monkeypatch):
    x = np.arange(1000, dtype=np.uint32)
    seeded(5)
    first = masked_vector(x)
    seeded(5)
    assert masked_vector(x).tolist() == first.tolist()       # everything fixed: the same vector
    seeded(5)
    draw = keys.new_private
    calls = iter(range(100))

    def other_mask_key():                      # call 1 is participant 1's mask key; the generator moves on alike
        key = draw()
        return keys.private_from(bytes(31) + b"\x07") if next(calls) == 1 else key
    monkeypatch.setattr(keys, "new_private", other_mask_key)
    changed = masked_vector(x)                                # participant 1's mask key alone differs
    assert (changed != first).mean() > 0.99
