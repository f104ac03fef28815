"""Cross-device federated learning (Hsu et al. 2019): a population of virtual clients simulated on MPI trainer
ranks; each round the server samples a fraction of them, the ranks train their share one after another and
combine the clients' models by a reduction."""
