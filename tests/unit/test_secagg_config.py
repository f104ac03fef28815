"""`fed.secure_aggregation` checked before any rank starts (fedmpi/config/secure_aggregation.py): the rules that
compose are accepted with the modulus bits derived, and what needs each party's upload, sends something a sum
cannot carry, or could wrap is refused in one line naming the key and the reason."""
import pytest

from fedmpi.config import ConfigError, load_config
from fedmpi.config.secure_aggregation import COMPOSES
import numpy as np

from fedmpi.core.secure_uploads import dp_noise_std, dp_share, encoding, session_line

ON = ["fed.secure_aggregation.mode=secagg", "fv.enabled=false"]
MODE = "fed.secure_aggregation.mode: "


@pytest.mark.parametrize("rule", COMPOSES)
def test_every_composing_rule_is_accepted(rule):
    cfg = load_config(None, [*ON, f"fed.algorithm={rule}"])
    assert encoding(cfg).bits == 24            # 3 parties x 2^22 levels: ceil(log2(3 * 2^22 + 1))


@pytest.mark.parametrize("overrides, message", [
    (["fv.enabled=true"], MODE + "Federated Validation scores each party's theta_i, which the server no longer sees"),
    (["fed.aggregation.rule=median"], MODE + "fed.aggregation.rule=median needs each upload; the server sees only "
                                             "their sum: use rule mean"),
    (["fed.algorithm=fedavg", "fed.dp.enabled=true", "fed.dp.adaptive=true", "fed.dp.count_noise=1"],
     MODE + "fed.dp.adaptive needs the count of unclipped updates, which distributed DP does not sum"),
    (["fed.algorithm=fedavg", "fed.dp.enabled=true", "fed.weighting=batch"],
     MODE + "distributed DP (fed.dp under secure aggregation) weighs the parties alike"),
    (["fed.algorithm=fedaws"], MODE + "fedaws sends each party's class embeddings"),
    (["fed.algorithm=fedgc"], MODE + "fedgc sends each party's class embeddings"),
    (["fed.algorithm=mime_lite"], MODE + "mime_lite's server step needs more than the parties' weighted sum"),
    (["fed.setting=centralized"], MODE + "needs at least two participants (parties, or clients per round)"),
    (["fed.secure_aggregation.clipping_range=0"], "fed.secure_aggregation.clipping_range must be a positive number"),
    (["fed.secure_aggregation.quantization_bits=53"],
     "fed.secure_aggregation.quantization_bits must be an integer in [1, 52], got 53"),
    (["fed.secure_aggregation.threshold=4"], "fed.secure_aggregation.threshold: must lie in [2, 3]"),
    (["fed.secure_aggregation.mode=secagg+", "fed.secure_aggregation.neighbours=1"],
     "fed.secure_aggregation.neighbours: must be even and at least 2"),
])
def test_what_cannot_be_served_is_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError) as e:
        load_config(None, [*ON, *overrides])
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_a_sum_of_2000_parties_at_52_bits_would_wrap_and_is_refused():
    parties = ", ".join(f"{{name: p{i}, ranks: 1}}" for i in range(4100))
    with pytest.raises(ConfigError, match=r"^fed.secure_aggregation: 4100 participants x 2\^52 levels need 65-bit "
                                          r"sums, more than 64 could hold without wrapping"):
        load_config(None, [*ON, f"parties=[{parties}]", "fed.secure_aggregation.quantization_bits=52"])


def test_across_devices_the_clients_of_a_round_are_the_participants():
    cfg = load_config("configs/hsu_cifar10.yaml", ["fed.secure_aggregation.mode=secagg", "clients.dropout=0.1"])
    assert encoding(cfg).participants == 10 and encoding(cfg).bits == 26    # 10 clients a round x 2^22 levels
    assert cfg.fed.secure_aggregation.threshold_for(10) == 6


def test_the_readmes_secagg_plus_form_takes_a_threshold_its_graph_can_meet():
    """k = 4 neighbours of 10 clients a round: each participant's shares have 5 holders, so t defaults to their
    majority, 3 (not ⌊10/2⌋ + 1 = 6, which no participant could meet); the start-up line names it."""
    cfg = load_config("configs/hsu_cifar10.yaml", ["fed.secure_aggregation.mode=secagg+",
                                                   "fed.secure_aggregation.neighbours=4"])
    assert cfg.fed.secure_aggregation.threshold_for(10) == 3
    assert session_line(cfg) == ("secure aggregation: secagg+, 10 participants a round, 4 neighbours each, "
                                 "threshold t = 3 of the 5 holders of each participant's shares")
    with pytest.raises(ConfigError) as e:
        load_config("configs/hsu_cifar10.yaml", ["fed.secure_aggregation.mode=secagg+",
                                                 "fed.secure_aggregation.neighbours=4",
                                                 "fed.secure_aggregation.threshold=6"])
    assert str(e.value) == ("fed.secure_aggregation.threshold: must lie in [2, 5] (a participant's 4 neighbours "
                            "and itself hold its shares), got 6; or 0 for the default 3")


@pytest.mark.parametrize("overrides, message", [
    (["fed.secure_aggregation.mode=secagg", "fed.algorithm=scaffold"],
     "fed.secure_aggregation.mode: scaffold's clients' states (control) are kept by the server"),
    (["clients.dropout=0.1"], "clients.dropout: simulates clients missing a stage of secure aggregation"),
    (["fed.secure_aggregation.mode=secagg", "clients.dropout=1.0"], "clients.dropout: must be in [0, 1), got 1.0"),
])
def test_across_devices_what_cannot_be_served_is_refused(overrides, message):
    with pytest.raises(ConfigError) as e:
        load_config("configs/hsu_cifar10.yaml", overrides)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_distributed_dp_shares_add_up_to_the_central_noise():
    """Each of the P = 3 parties adds N(0, (z C)² / 3): the sum carries DP-FedAvg's N(0, (z C)²); across devices
    the shares are sized for the threshold t of the clients a round (6 of 10), as fewer may survive."""
    cfg = load_config(None, [*ON, "fed.algorithm=fedavg", "fed.dp.enabled=true", "fed.dp.clip=2.0",
                             "fed.dp.noise_multiplier=0.9"])
    assert dp_noise_std(cfg) == pytest.approx(0.9 * 2.0 / 3 ** 0.5)
    cross = load_config("configs/hsu_cifar10.yaml", ["fed.secure_aggregation.mode=secagg", "fed.algorithm=fedavg",
                                                     "fed.dp.enabled=true", "fed.dp.clip=2.0"])
    assert dp_noise_std(cross) == pytest.approx(1.0 * 2.0 / 6 ** 0.5)
    x = np.full(400_000, 0.01)                    # norm 6.32: clipped to 2, then noised
    shared = dp_share(x.copy(), 2.0, 0.5) - 2.0 / np.linalg.norm(x) * x
    assert abs(shared.std() - 0.5) < 0.005 and abs(shared.mean()) < 0.005
    small = np.full(4, 0.01)
    assert np.abs(dp_share(small.copy(), 2.0, 0.0) - small).max() == 0     # within C: kept whole


def test_the_face_clients_are_refused_their_rows_would_reach_the_server_in_the_clear():
    """Their class embeddings travel to the server's store between rounds, which masking cannot hide (and such a
    run waited for ever for the states the secure exchange never sends)."""
    with pytest.raises(ConfigError, match="^" + MODE + "the face clients' class embeddings .* in the clear: use "
                                          r"clients.dataset=cifar10 \(or synthetic\), or the silo setting$"):
        load_config("configs/faces_devices.yaml", ["fed.algorithm=fedavg", "fed.options={}", *ON])
