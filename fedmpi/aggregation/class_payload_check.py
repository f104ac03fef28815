"""A class payload (a party's class embeddings W_k or its summary; a face client's w_c) is looked at as a backbone
upload is (aggregation/upload_check.py): it is out of range when it is not finite, or when its root-mean-square
value s_i = ‖u_i‖ / √(values) exceeds ρ times the median of the others' (ρ = fed.upload_check.norm_ratio, the
backbone check's robust ratio: honest class embeddings have norms of one scale, a payload scaled by 10^30 is
10^30 times theirs). A payload shorter than the server's buffer is wrongly shaped (its end's mark is still there,
comm/message_end.py). What is left out is named and left out of the class step; its sender keeps its own last
good rows (silo/server_classes.py, crossdevice/client_state.py); a summary is not relayed (silo/server_classes.py,
crossdevice/cluster_relay.py)."""
from __future__ import annotations

import numpy as np
import torch

from fedmpi.aggregation.upload_check import judge
from fedmpi.comm.message_end import reached_end


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


def wrongly_shaped(buffer: torch.Tensor) -> str | None:
    """Why a received payload is wrongly shaped (it did not fill the buffer the server expects it in: a longer one
    gloo refuses itself, comm/message_end.py), or None."""
    if reached_end(buffer):
        return None
    return f"wrongly shaped (shorter than the {' x '.join(map(str, buffer.shape))} values the server expects of it)"


def left_out(payloads: list[torch.Tensor], norm_ratio: float) -> list[str | None]:
    """For each received payload, why it is left out (wrongly shaped; else not finite or out of range among the
    whole ones), or None where it is kept."""
    why = [wrongly_shaped(u) for u in payloads]
    whole = [k for k, reason in enumerate(why) if reason is None]
    for k, reason in zip(whole, out_of_range([payloads[k] for k in whole], norm_ratio)):
        why[k] = reason
    return why
