"""bench/demo_rounds.py's trainer idle fraction on known inputs: 1 - a party's slowest rank's training seconds
(its images / its images per second) / the round's wall time."""
import numpy as np

from bench.demo_rounds import idle_fractions


def test_idle_fraction_is_the_share_of_the_round_a_party_did_not_train():
    # K=10, batch 32: the 2-rank party trained 640 images, the 1-rank one 320; rounds of 4 s and 8 s
    rounds = {"round_time": np.array([4.0, 8.0]),
              "party_images_per_s": np.array([[160.0, 100.0], [320.0, 160.0]])}
    idle = idle_fractions(rounds, ["two", "one"], K=10, batch=32, ranks=[2, 1])
    # 640/160 = 4 s of 4 s; 320/100 = 3.2 s of 4 s; 640/320 = 2 s of 8 s; 320/160 = 2 s of 8 s
    assert np.allclose(idle, [[0.0, 0.2], [0.75, 0.75]])
