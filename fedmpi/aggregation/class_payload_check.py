"""A class payload (a party's class embeddings W_k or its summary; a face client's w_c) is looked at as a backbone
upload is (aggregation/upload_check.py): it is out of range when it is not finite, or when its root-mean-square
value s_i = ‖u_i‖ / √(values) exceeds ρ times the median of the others' (ρ = fed.upload_check.norm_ratio, the
backbone check's robust ratio: honest class embeddings have norms of one scale, a payload scaled by 10^30 is
10^30 times theirs). What is out of range is named and left out of the class step; its sender keeps its own last
good rows (silo/server_classes.py, crossdevice/client_state.py)."""
from __future__ import annotations

import numpy as np
import torch

from fedmpi.aggregation.upload_check import judge


def rms_values(payloads: list[torch.Tensor]) -> np.ndarray:
    """[P] float64 s_i, NaN where a payload is not finite."""
    out = np.array([float(torch.linalg.vector_norm(u, dtype=torch.float64)) / max(u.numel(), 1) ** 0.5
                    for u in payloads])
    finite = np.array([bool(torch.isfinite(u).all()) for u in payloads], dtype=bool)
    return np.where(finite, out, np.nan)


def out_of_range(payloads: list[torch.Tensor], norm_ratio: float) -> list[str | None]:
    """For each payload, why it is left out (one phrase), or None where it is kept."""
    if not payloads:
        return []
    values = rms_values(payloads)
    ratios, out = judge(values, norm_ratio)
    return [None if not bad else "not finite" if not np.isfinite(v) else
            f"out of range (its RMS value {v:.3g} is {ratio:.3g} x the median of the others', over "
            f"fed.upload_check.norm_ratio {norm_ratio:g})" for v, ratio, bad in zip(values, ratios, out)]
