"""What a run's participants encode under secure aggregation, the glue of the pure fedmpi/secagg to a run's config
and payloads: the fixed point for the run's participants per round (the silo parties, or the clients sampled), an
upload's update, u − ref with ref = [Θ | 0] (the global backbone the round started from; the rule's up payloads are
deltas already), and with fed.dp the participant's share of DP-FedAvg's noise (distributed DP, below)."""
from __future__ import annotations

import math
import secrets

import numpy as np
import torch

from fedmpi.secagg.encoding import Encoding


def encoding(cfg) -> Encoding:
    from fedmpi.config.aggregation import uploads
    s = cfg.fed.secure_aggregation
    return Encoding(s.clipping_range, s.quantization_bits, uploads(cfg))


def session_line(cfg) -> str | None:
    """The start-up line naming the session's graph and threshold t (derived unless set), or None."""
    from fedmpi.config.aggregation import uploads
    s = cfg.fed.secure_aggregation
    return s.describe(uploads(cfg)) if s.enabled else None


def deltas(up: torch.Tensor, down: torch.Tensor, backbone: int) -> np.ndarray:
    """u − ref as float64 on the host: θ − Θ over the backbone, the up payloads as they are."""
    x = up.detach().to("cpu", torch.float64).numpy().copy()
    x[:backbone] -= down[:backbone].detach().to("cpu", torch.float64).numpy()
    return x


def mean_into(out: torch.Tensor, theta: torch.Tensor, mean: np.ndarray | None) -> torch.Tensor:
    """out = ref + the decoded mean update (None: a refused round, no update: out = ref)."""
    D = theta.numel()
    if mean is None:
        out.zero_()
        out[:D] = theta
        return out
    update = torch.from_numpy(mean)
    out[:D] = theta + update[:D]
    out[D:] = update[D:]
    return out


def dp_noise_std(cfg) -> float | None:
    """With fed.dp, the standard deviation of each participant's noise share: σ_s = z C / sqrt(n), n = the
    participants a sum is guaranteed to hold (the P parties; across devices the threshold t, since fewer shares
    survive a round with dropouts). n' >= n shares sum to N(0, n' σ_s² I): at least the z² C² DP-FedAvg adds to
    the sum on the server, so its accountant's ε holds (while every participant adds its share: c colluders who
    know theirs leave (n' − c)/n of it)."""
    dp = cfg.fed.dp
    if not dp.enabled:
        return None
    from fedmpi.config.aggregation import uploads
    n = uploads(cfg)
    guaranteed = cfg.fed.secure_aggregation.threshold_for(n) if cfg.cross_device else n
    return dp.noise_multiplier * dp.clip / math.sqrt(guaranteed)


def decoded_mean(enc: Encoding, total: np.ndarray, count: int, share_std: float | None
                 ) -> tuple[np.ndarray, float | None]:
    """(the mean update, the std per entry of the noise it carries: None without distributed DP) from the
    unmasked sum of `count` participants' encodings. Without DP: Σ w_q x / Σ w_q over the survivors. With DP
    every participant weighs 1 and the sum is divided by the m sampled, not by the n' that survived: the
    fixed-denominator estimator of DP-FedAvg (McMahan et al. 2018, §3, f̃_f with W = qW = m), whose sensitivity
    to one participant is C / m whatever n'. The noise it carries is then sqrt(n') σ_s / m = sqrt(n' / t) z C / m
    (σ_s = z C / sqrt(t), dp_noise_std): z C / m, what the accountant assumes, when n' = t survive, and at most
    sqrt(m / t) times that when all m do."""
    summed, weight = enc.decode(total, count)
    if share_std is None:
        return summed / weight, None
    m = enc.participants
    return summed / m, math.sqrt(count) * share_std / m


def dp_share(x: np.ndarray, clip: float, std: float) -> np.ndarray:
    """In place: x clipped to L2 norm `clip` (DP-FedAvg's clip of θ − Θ), plus N(0, std² I) from OS entropy (the
    noise must not be predictable to the server, spec §8.8). Encoding it afterwards is post-processing."""
    norm = float(np.linalg.norm(x))
    if norm > clip:
        x *= clip / norm
    x += np.random.default_rng(secrets.randbits(128)).standard_normal(x.size) * std
    return x
