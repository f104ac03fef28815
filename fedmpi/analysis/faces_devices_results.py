"""The numbers of a phone-per-person study (jobs/faces_devices_study.py) read back from its files: a device run's
log (the verification of Θ after its first and last round, W's collapse curve, the bytes per sampled client) and the
pretrained start's evaluation by tools.evaluate."""
from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np

from fedmpi.store.h5log import LogReader

IJB = "ijbc"            # the synthetic IJB-C (fedmpi/protocols/fixtures.py): 200 templates, ~3,000 pairs
IJB_FAR = "1e-2"        # its ~2,700 impostor pairs read TAR no lower than FAR 1e-3 (2.7 false accepts)


def start_summary(out: Path) -> dict:
    """The start's mean held-out accuracy and IJB-C TAR from tools.evaluate's files in `out`."""
    sets = json.loads((out / "pairs.json").read_text())["sets"]
    with h5py.File(out / f"{IJB}.h5", "r") as f:
        tar = json.loads(f.attrs["metrics"])[f"tar_far_{IJB_FAR}"]
    return {"accuracy": float(np.mean([v["accuracy"] for v in sets.values()])), "ijb": float(tar)}


def summary(path: Path) -> dict:
    """A device run's mean held-out accuracy and IJB-C TAR after its first and last round, its cosine curve and
    the bytes a round moved per sampled client."""
    with LogReader(path) as log:
        ev, classes, rounds = log.table("eval"), log.table("classes"), log.table("rounds")
        clients = log.table("clients")["ids"].shape[1]
    sets = sorted({k.split("/")[0] for k in ev if k.endswith("/accuracy")})
    accuracy = np.mean([ev[f"{name}/accuracy"] for name in sets], axis=0)
    tar = ev[f"{IJB}/tar_far_{IJB_FAR}"]
    return {"first": float(accuracy[0]), "last": float(accuracy[-1]), "cosine": classes["mean_cosine"].tolist(),
            "ijb_first": float(tar[0]), "ijb_last": float(tar[-1]),
            "bytes_per_client": float((rounds["bytes_up"] + rounds["bytes_down"]).mean() / clients)}
