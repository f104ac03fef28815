"""Federated Validation (FedFace Sec. 3.2, Alg. 2): the search, the server's weighting, the validator ranks."""
