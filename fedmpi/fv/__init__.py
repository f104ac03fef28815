"""Federated Validation (FedFace Sec. 3.2, Alg. 2): the search (search.py), the server's weighting
(weighting.py), the validator ranks (validator.py) and the server's client for them (validator_client.py)."""


def fv_runs(cfg) -> bool:
    """Whether a run does Federated Validation: the one place that reads fv.enabled (the config refuses it
    for the cross-device setting)."""
    return cfg.fv.enabled
