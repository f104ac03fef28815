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
    """With fed.dp, the standard deviation of each participant's noise share: z C / sqrt(n), n = the participants
    a sum is guaranteed to hold (the parties; across devices the threshold t, since fewer shares survive a
    round with dropouts). The sum of n' >= n shares is N(0, (n'/n) z² C²): at least the noise DP-FedAvg adds on
    the server, so its accountant's ε holds (while every participant adds its share: c colluders who know theirs
    leave (n' − c)/n of it)."""
    dp = cfg.fed.dp
    if not dp.enabled:
        return None
    from fedmpi.config.aggregation import uploads
    n = uploads(cfg)
    guaranteed = cfg.fed.secure_aggregation.threshold_for(n) if cfg.cross_device else n
    return dp.noise_multiplier * dp.clip / math.sqrt(guaranteed)


def dp_share(x: np.ndarray, clip: float, std: float) -> np.ndarray:
    """In place: x clipped to L2 norm `clip` (DP-FedAvg's clip of θ − Θ), plus N(0, std² I) from OS entropy (the
    noise must not be predictable to the server, spec §8.8). Encoding it afterwards is post-processing."""
    norm = float(np.linalg.norm(x))
    if norm > clip:
        x *= clip / norm
    x += np.random.default_rng(secrets.randbits(128)).standard_normal(x.size) * std
    return x
