"""Federated Validation (FedFace Sec. 3.2, Alg. 2): the search (search.py), the server's weighting
(weighting.py), the validator ranks (validator.py) and the server's client for them (validator_client.py).
No torch here: the launch's memory check (fedmpi/memory) reads these before any rank imports it."""
from fedmpi.config.sections import fv_runs


def assign_sets(val_sets: list[str], validators: int) -> list[list[str]]:
    """Round-robin: validator k owns val_sets[k], val_sets[k + n], ... (n = number of validator ranks)."""
    if validators > len(val_sets):
        raise ValueError(f"fv.validators: {validators} dedicated validators for {len(val_sets)} validation sets "
                         f"({', '.join(val_sets)}); every validator needs at least one set")
    return [list(val_sets[k::validators]) for k in range(validators)]


def needs_validation_sets(cfg) -> bool:
    """Whether anything in the run reads the validation sets: FV, or held-out evaluation (eval.every > 0)."""
    return not cfg.cross_device and (fv_runs(cfg) or cfg.eval.every > 0)
