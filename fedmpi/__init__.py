"""fedmpi: federated face recognition (FedFace: PFM + FV, FedAvg, FedAvgM) on MPI ranks."""

__version__ = "0.1.0"
