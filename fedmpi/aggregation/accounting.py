"""Privacy accounting of DP-FedAvg with Google's dp-accounting library, RDP accountant (Mironov 2017; the
moments accountant of McMahan et al. 2018 and the one TensorFlow Federated and Opacus report with): each round
is one Gaussian mechanism of noise multiplier z on the clipped updates, Poisson-subsampled at rate q where only
a fraction of the clients takes part (q = 1 in the silo setting: every party, every round)."""
from __future__ import annotations

import logging
from functools import cache

ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [128, 256, 512, 1024]


class _NonConvergedOrders(logging.Filter):
    """dp-accounting warns for each RDP order whose series does not converge (orders near 1 at q < 1: 7 orders,
    every round of a cross-device run) and leaves that order out: ε is the bound over the other orders, as
    documented. The warning says nothing a user can act on, so it is dropped; anything else it logs is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "failed to converge" not in record.getMessage()


@cache
def _library():
    """dp_accounting, imported on first use: it brings scipy and absl, which runs without DP need not load."""
    import dp_accounting

    logging.getLogger("absl").addFilter(_NonConvergedOrders())
    return dp_accounting


def round_event(noise_multiplier: float, sampling_rate: float = 1.0):
    dp_accounting = _library()
    gaussian = dp_accounting.GaussianDpEvent(noise_multiplier)
    return gaussian if sampling_rate >= 1.0 else dp_accounting.PoissonSampledDpEvent(sampling_rate, gaussian)


def epsilon(rounds: int, noise_multiplier: float, delta: float, sampling_rate: float = 1.0) -> float:
    """ε at δ after `rounds` rounds (0 before the first; inf without noise)."""
    if rounds == 0:
        return 0.0
    if noise_multiplier <= 0:
        return float("inf")
    accountant = _library().rdp.RdpAccountant(ORDERS)
    accountant.compose(round_event(noise_multiplier, sampling_rate), rounds)
    return float(accountant.get_epsilon(delta))
