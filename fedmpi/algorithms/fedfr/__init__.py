"""FedFR (Liu et al., AAAI 2022): the method as the registry composes it (rule.py: its options and its local
training part), its local objective on a trainer rank (objective.py) and its hard negatives (hard_negatives.py)."""
from fedmpi.algorithms.fedfr.rule import FedFR, FedFROptions, FedFRTraining

__all__ = ["FedFR", "FedFROptions", "FedFRTraining"]
