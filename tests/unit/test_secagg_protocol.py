"""The SecAgg / SecAgg+ rounds of fedmpi/secagg (one process, every participant and the server): the unmasked sum
equals the plain sum of the same encodings bit for bit, with and without dropouts at each stage (spec §7 O1, O2);
below the threshold nothing is unmasked; a participant never releases both secrets of one peer (O3); Shamir (O4);
a bad participant (wrong-length or out-of-range vector, a share that does not reconstruct) named in one line."""
import random

import numpy as np
import pytest

from fedmpi.secagg import ProtocolError, graph, shares
from fedmpi.secagg.encoding import Encoding
from fedmpi.secagg.participant import Participant
from fedmpi.secagg.server import Session
from fedmpi.secagg.simulate import draw_dropouts, run_round


def plain_sum(inputs, ids, bits):
    return (sum(inputs[u].astype(np.uint64) for u in ids) % (1 << bits)).astype(inputs[ids[0]].dtype)


def random_inputs(rng, n, m, bits):
    ids = sorted(rng.choice(np.arange(1, 1000), size=n, replace=False).tolist())
    dtype = np.uint32 if bits <= 32 else np.uint64
    return {u: rng.integers(0, 1 << bits, size=m, dtype=np.uint64).astype(dtype) for u in ids}


@pytest.mark.parametrize("case", range(6))
def test_sum_is_exact_bit_for_bit(case):
    rng = np.random.default_rng(case)
    n, m, bits = int(rng.integers(2, 13)), int(rng.integers(1, 1001)), [8, 16, 32, 40, 32, 16][case]
    inputs = random_inputs(rng, n, m, bits)
    degree = None if case % 2 else 2 * max(1, (n - 1) // 4)
    total, session = run_round(inputs, bits, 2, degree, rng=random.Random(case))
    assert total.tolist() == plain_sum(inputs, sorted(inputs), bits).tolist()
    assert session.dropped_at == {}


def test_weighted_encodings_sum_exactly_and_decode_to_the_weighted_mean():
    rng = np.random.default_rng(7)
    enc = Encoding(8.0, 22, 5)
    xs = {u: rng.normal(size=300) for u in range(1, 6)}
    inputs = {u: enc.encode(xs[u], u / 5, np.random.default_rng(u)) for u in xs}
    total, _ = run_round(inputs, enc.bits, 3)
    assert total.tolist() == plain_sum(inputs, list(xs), enc.bits).tolist()
    summed, weight = enc.decode(total, 5)
    assert weight == 3.0
    assert np.abs(summed / weight - sum(u / 5 * xs[u] for u in xs) / 3.0).max() <= enc.error_bound(5, weight)


@pytest.mark.parametrize("degree", [None, 4])
@pytest.mark.parametrize("stage", ["advertise", "share keys", "masked input", "unmask"])
def test_dropouts_at_each_stage_leave_the_survivors_sum(stage, degree):
    rng = np.random.default_rng(3)
    inputs = random_inputs(rng, 9, 50, 24)
    ids = sorted(inputs)
    gone = {ids[1], ids[6]}
    total, session = run_round(inputs, 24, 3, degree, drop={stage: gone}, rng=random.Random(1))
    counted = ids if stage == "unmask" else [u for u in ids if u not in gone]   # after R2 the input stays in
    assert total.tolist() == plain_sum(inputs, counted, 24).tolist()
    assert session.dropped_at == {u: stage for u in gone}


def test_dropouts_over_several_stages():
    rng = np.random.default_rng(5)
    inputs = random_inputs(rng, 10, 20, 32)
    ids = sorted(inputs)
    drop = {"advertise": {ids[0]}, "share keys": {ids[3]}, "masked input": {ids[5], ids[8]}, "unmask": {ids[9]}}
    total, session = run_round(inputs, 32, 5, drop=drop)
    counted = [u for u in ids if u not in {ids[0], ids[3], ids[5], ids[8]}]
    assert total.tolist() == plain_sum(inputs, counted, 32).tolist()
    assert session.dropped_at == {ids[0]: "advertise", ids[3]: "share keys", ids[5]: "masked input",
                                  ids[8]: "masked input", ids[9]: "unmask"}


@pytest.mark.parametrize("stage", ["advertise", "share keys", "masked input", "unmask"])
def test_below_threshold_the_round_is_refused(stage):
    inputs = random_inputs(np.random.default_rng(0), 5, 10, 16)
    with pytest.raises(ProtocolError, match=f"2 participants reached {stage}, fewer than the threshold 3: "
                                            "the round is not unmasked"):
        run_round(inputs, 16, 3, drop={stage: set(sorted(inputs)[:3])})


def staged(n=4, m=6, bits=16, threshold=3):
    """A session brought to its masked-input stage by hand: (session, participants, boxes routed)."""
    session = Session(0, list(range(1, n + 1)), threshold, bits, m)
    people = {u: Participant(u, bits) for u in range(1, n + 1)}
    sid, peers = session.receive_keys({u: p.advertise() for u, p in people.items()})
    routed = session.route_shares({u: p.share_keys(sid, threshold, peers[u]) for u, p in people.items()})
    return session, people, routed


def test_late_duplicate_wrong_length_and_out_of_range_vectors_named():
    session, people, routed = staged()
    x = np.arange(6, dtype=np.uint32)
    y1 = people[1].masked_input(routed[1], x)
    session.receive_masked(1, y1)
    with pytest.raises(ProtocolError, match="^participant 1: masked input without shared keys, or sent twice$"):
        session.receive_masked(1, y1)
    with pytest.raises(ProtocolError, match="^participant 2: masked vector of 5 uint32 entries, expected 6 uint32$"):
        session.receive_masked(2, np.zeros(5, dtype=np.uint32))
    with pytest.raises(ProtocolError, match=r"^participant 3: masked vector has entries >= 2\^16, the modulus$"):
        session.receive_masked(3, np.full(6, 1 << 16, dtype=np.uint32))
    for u in (2, 3):
        session.receive_masked(u, people[u].masked_input(routed[u], x))
    session.close_masked()
    with pytest.raises(ProtocolError, match="^participant 4: masked input arrived after the masked-input stage closed$"):
        session.receive_masked(4, people[4].masked_input(routed[4], x))


@pytest.mark.parametrize("liar", [1, 4])     # among the first t shares, or beyond them
def test_a_share_that_does_not_reconstruct_is_named(liar):
    session, people, routed = staged(n=5)
    x = np.ones(6, dtype=np.uint32)
    for u in range(1, 6):
        session.receive_masked(u, people[u].masked_input(routed[u], x))
    survivors, dropped = session.close_masked()
    answers = {u: people[u].unmask(survivors, dropped) for u in survivors}
    answers[liar][2] = (int.from_bytes(answers[liar][2], "big") + 1).to_bytes(shares.SHARE_BYTES, "big")
    with pytest.raises(ProtocolError, match=f"^participant {liar}: its share of participant 2's self-mask seed does not "
                                            "reconstruct: the round is not unmasked$"):
        session.unmask(answers)


def test_a_tampered_box_is_named_by_its_sender():
    session, people, routed = staged()
    box = bytearray(routed[1][2])
    box[-1] ^= 1
    with pytest.raises(ProtocolError, match="^participant 2: its shares for participant 1 do not decrypt$"):
        people[1].masked_input({**routed[1], 2: bytes(box)}, np.zeros(6, dtype=np.uint32))


def test_never_both_secrets_of_one_peer():
    session, people, routed = staged()
    for u in (1, 2, 3):
        session.receive_masked(u, people[u].masked_input(routed[u], np.zeros(6, dtype=np.uint32)))
    with pytest.raises(ProtocolError, match="^participant 1: the survivors and the dropped overlap or repeat$"):
        people[1].unmask([1, 2, 3], [3, 4])
    with pytest.raises(ProtocolError, match="^participant 1: asked for unmask while at done$"):
        people[1].unmask([1, 2, 3], [4])              # a second request could ask for the other secret
    answer = people[2].unmask([1, 2, 3], [4])
    assert answer == {v: people[2]._shares[v][0] for v in (1, 2, 3)} | {4: people[2]._shares[4][1]}


def test_shamir_any_threshold_reconstructs_and_ids_are_never_zero():
    secret = bytes(range(32))
    held = shares.split(secret, 3, [1, 2, 5, 9, 11])
    for chosen in ([1, 2, 5], [2, 9, 11], [11, 5, 1]):
        assert shares.combine({v: held[v] for v in chosen}, 3) == secret
    with pytest.raises(ValueError, match="share holders must be distinct positive ids"):
        shares.split(secret, 2, [0, 1, 2])
    with pytest.raises(ValueError, match=r"threshold 1 must lie in \[2, 3 holders\]"):
        shares.split(secret, 1, [1, 2, 3])


def test_secagg_plus_graph_is_k_regular():
    session = Session(0, list(range(1, 101)), 6, 32, 1, degree=12, rng=random.Random(0))
    assert {len(n) for n in session.neighbours.values()} == {12}
    assert all(u in session.neighbours[v] for u in session.neighbours for v in session.neighbours[u])
    with pytest.raises(ValueError, match="threshold 14 exceeds the 13 share holders"):
        Session(0, list(range(1, 101)), 14, 32, 1, degree=12)


def test_a_cohort_of_100_with_random_dropouts_sums_its_survivors_or_refuses():
    """SecAgg+ (k = 12, t = 6: FCP's finder for 5 % corrupt, 5 % dropped) over 100 clients, each missing each stage
    with probability p: the round gives exactly the survivors' sum and logs who dropped where, or refuses whole."""
    rng = np.random.default_rng(11)
    inputs = random_inputs(rng, 100, 30, 32)
    outcomes = []
    for seed, rate in [(0, 0.05), (1, 0.1), (2, 0.6)]:
        drop = draw_dropouts(list(inputs), rate, random.Random(seed))
        try:
            total, session = run_round(inputs, 32, 6, degree=12, drop=drop, rng=random.Random(seed))
        except ProtocolError as exc:
            assert "the round is not unmasked" in str(exc)
            outcomes.append("refused")
            continue
        counted = sorted(session.u3)
        assert total.tolist() == plain_sum(inputs, counted, 32).tolist()
        missed = {u: stage for stage, ids in drop.items() for u in ids}
        assert {u: s for u, s in session.dropped_at.items() if u in missed} == missed
        assert set(counted) == set(inputs) - {u for u, s in session.dropped_at.items() if s != "unmask"}
        outcomes.append(len(counted))
    assert outcomes == [82, 66, "refused"]      # 60 % per stage: some client's secret keeps fewer than t holders


def test_a_participant_fewer_than_t_hold_the_shares_of_leaves_and_the_round_completes_without_it():
    """SecAgg+ with k = 4, t = 3 over 10: three of u's four neighbours miss the share-keys stage, so u's shares are
    held by its fourth neighbour and itself, 2 < t, and no one could remove u's masks. u leaves the round at that
    stage (a dropout there) and no one masks with it; the other six are unmasked exactly."""
    inputs = random_inputs(np.random.default_rng(12), 10, 500, 24)
    ids = sorted(inputs)
    ring = list(ids)
    random.Random(4).shuffle(ring)           # the Harary graph Session draws from the same generator
    i = 5
    u, gone = ring[i], {ring[i - 1], ring[(i + 1) % 10], ring[(i + 2) % 10]}
    assert graph.harary(ids, 4, random.Random(4))[u] == gone | {ring[i - 2]}
    total, session = run_round(inputs, 24, 3, degree=4, drop={"share keys": gone}, rng=random.Random(4))
    assert session.dropped_at == {v: "share keys" for v in gone | {u}}
    counted = [v for v in ids if v not in gone | {u}]
    assert sorted(session.u3) == counted
    assert total.tolist() == plain_sum(inputs, counted, 24).tolist()


def test_a_participant_given_fewer_than_t_holders_refuses_to_send_its_masked_input():
    people = {v: Participant(v, 16) for v in (1, 2, 3)}
    session = Session(0, [1, 2, 3], 3, 16, 4)
    sid, peers = session.receive_keys({v: p.advertise() for v, p in people.items()})
    sent = {v: people[v].share_keys(sid, 3, peers[v]) for v in (1, 2)}
    only = {2: sent[2][0][1]}                # a server that routes participant 1 one box of the two it needs
    with pytest.raises(ProtocolError, match=r"^participant 1: 2 holders of its shares, fewer than the threshold 3: "
                                            r"it leaves the round$"):
        people[1].masked_input(only, np.zeros(4, np.uint32))
