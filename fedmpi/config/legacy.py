"""Configs of earlier versions read as today's, before the sections are built: every loader passes the raw YAML
mapping through `migrate_legacy`."""
from __future__ import annotations

from fedmpi.algorithms.registry import BASELINE
from fedmpi.config.sections import OptimConfig

# Keys of earlier versions: fed.algorithm=centralized|solo were settings (momentum SGD, the local momentum
# being optim.momentum), and FedAvgM's options lived in fed.
LEGACY_SERVER_KEYS = {"server_momentum": "momentum", "server_lr": "lr", "nesterov": "nesterov"}


def migrate_legacy(data: dict) -> dict:
    fed = data.get("fed")
    if not isinstance(fed, dict):
        return data
    fed = dict(fed)
    if fed.get("algorithm") in ("centralized", "solo"):
        fed["setting"], fed["algorithm"] = fed["algorithm"], BASELINE
        fed["local_momentum"] = (data.get("optim") or {}).get("momentum", OptimConfig.momentum)
    for old, new in LEGACY_SERVER_KEYS.items():
        if old in fed:
            server = dict(fed.get("server") or {})
            server[new] = fed.pop(old)
            fed["server"] = server
    return {**data, "fed": fed}
