"""Distributed DP with dropouts (core/secure_uploads.py, `dp_noise_std`, `decoded_mean`; aggregation/dp.py): the
m = 10 clients of a Hsu round each add their share of the noise (sized for the threshold t = 6) to a zero update,
n' of them survive a SecAgg round, the server decodes the fixed-denominator mean and its Gaussian mechanism logs
`noise_std`. The per-entry std of the decoded mean equals the logged one within sampling error for n' = 10 ... 6,
and with t survivors it is exactly the z C / m the accountant assumes."""
import math

import numpy as np
import pytest
import torch

from fedmpi.aggregation.aggregators import WeightedMean
from fedmpi.aggregation.dp import GaussianMechanism
from fedmpi.config import load_config
from fedmpi.core.secure_uploads import decoded_mean, dp_noise_std, dp_share, encoding
from fedmpi.secagg.simulate import run_round

ENTRIES = 200_000            # the std of 200,000 normal draws is within 1 % of sigma at 4.5 standard errors
Z, C = 0.5, 1.0


class DecodedRound:
    """The exchange's face to the aggregator: the decoded mean and the noise it carries."""

    def __init__(self, mean: np.ndarray, noise_std: float):
        self.mean, self.noise_std = mean, noise_std

    def weighted_mean(self, w, out: torch.Tensor) -> torch.Tensor:
        return out.copy_(torch.from_numpy(self.mean))


@pytest.mark.parametrize("survivors", [10, 9, 8, 7, 6])
def test_the_noise_in_the_mean_is_the_logged_noise_std_with_dropouts(survivors):
    cfg = load_config("configs/hsu_cifar10.yaml", ["fed.secure_aggregation.mode=secagg", "fed.algorithm=fedavg",
                                                   "fed.dp.enabled=true", f"fed.dp.clip={C}",
                                                   f"fed.dp.noise_multiplier={Z}"])
    enc, share_std, m, t = encoding(cfg), dp_noise_std(cfg), 10, 6
    assert (enc.participants, cfg.fed.secure_aggregation.threshold_for(m)) == (m, t)
    rng = np.random.default_rng(survivors)
    inputs = {u: enc.encode(dp_share(np.zeros(ENTRIES), C, share_std), 1.0, rng) for u in range(1, m + 1)}
    gone = set(range(survivors + 1, m + 1))            # they miss the masked input: their noise is not in the sum
    total, session = run_round(inputs, enc.bits, t, drop={"masked input": gone})
    assert len(session.u3) == survivors
    mean, noise_std = decoded_mean(enc, total, survivors, share_std)
    mechanism = GaussianMechanism(WeightedMean(), cfg.fed.dp, m, clip_at_server=False, noised_by_participants=True)
    out = mechanism(DecodedRound(mean, noise_std), None, torch.empty(ENTRIES, dtype=torch.float64))
    logged = mechanism.last["noise_std"]
    assert logged == pytest.approx(math.sqrt(survivors / t) * Z * C / m, rel=1e-12)
    assert float(out.std()) == pytest.approx(logged, rel=0.01)
    assert abs(float(out.mean())) < 5 * logged / math.sqrt(ENTRIES)
    assert logged >= Z * C / m * (1 - 1e-12)            # never below what the accountant assumes
