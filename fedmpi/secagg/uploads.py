"""What a run's participants encode (the glue of fedmpi/secagg to a run's config and payloads): the fixed point
for the run's participants per round (the silo parties, or the clients sampled) and an upload's update, u − ref
with ref = [Θ | 0] (the global backbone the round started from; the rule's up payloads are deltas already)."""
from __future__ import annotations

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
