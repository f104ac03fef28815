"""Short runs across devices in one launch of 3 ranks (1 server + 2 trainer ranks) under mpirun, and what each
logged: every table of its log, the final Θ's digest (run_digest.py). The face clients of
configs/faces_devices.yaml (FedAwS in the paper's form on every row and on the round's rows, in FedFR's form on the
cohort's rows as FedFR's code, positive-only FedAvg, FedGC with the synthetic IJB-C), PrivacyFace on the albums of
configs/faces_albums.yaml, and the CIFAR clients of configs/hsu_cifar10.yaml plain and under secure aggregation
(SecAgg with dropouts, a refused round, SecAgg+, distributed DP at a fixed seed). A refactor that must not change
behaviour compares this JSON before and after (bit-identical floats, written as their hex).

usage: python tests/support/device_losses.py OUT.json [WORKDIR]   (WORKDIR: where the runs go, default a temporary
folder; run it from the worktree under test with PYTHONPATH=$PWD, under the heavy lock: 3 ranks, a few minutes)"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from run_digest import launch_and_digest  # noqa: E402

# tests/mpi/test_device_faces_mpi.py's clients, 3 rounds, evaluated after the first and the last
FACES = ["--config", "configs/faces_devices.yaml", "clients.population=16", "clients.faces.identities=16",
         "clients.faces.images_per_identity=8", "clients.fraction=0.5", "clients.rounds=3", "eval.every=3",
         "optim.lr=0.1", "run.device=cpu", "run.deterministic=true"]
# tests/mpi/test_device_albums_mpi.py's: every sampled client releases its one cluster
ALBUMS = ["--config", "configs/faces_albums.yaml", "clients.population=8", "clients.faces.identities=32",
          "clients.faces.images_per_identity=4", "clients.fraction=0.5", "clients.rounds=3", "eval.every=3",
          "optim.lr=0.1", "run.device=cpu", "run.deterministic=true", "fed.options.kappa=0.0",
          "fed.options.epsilon_select=10", "fed.options.epsilon_count=10"]
# tests/mpi/test_secure_aggregation_crossdevice.py's: 20 clients, 10 a round, float64
CIFAR = ["--config", "configs/hsu_cifar10.yaml", "clients.population=20", "clients.images=12",
         "clients.train_images=300", "clients.test_images=40", "clients.fraction=0.5", "clients.rounds=2",
         "clients.alpha=0.5", "clients.ranks=2", "optim.batch_size=5", "optim.lr=0.05", "eval.every=2",
         "run.device=cpu", "run.deterministic=true", "run.dtype=float64"]
SECAGG = ["fed.algorithm=fedavg", "fed.secure_aggregation.mode=secagg", "fed.secure_aggregation.seed=1"]
RUNS = {
    "faces-fedaws-paper": [*FACES, "fed.options.lr_scale=10"],
    "faces-fedaws-paper-round": [*FACES, "fed.options.lr_scale=10", "fed.options.rows=round"],
    "faces-fedaws-fedfr-cohort": [*FACES, "fed.options.mode=fedfr", "fed.options.rows=cohort"],
    "faces-fedavg": [*FACES, "fed.algorithm=fedavg", "fed.options={}"],
    "faces-fedgc": [*FACES, "fed.algorithm=fedgc", "fed.options={}", "eval.sets.ijbc=synthetic"],
    "albums-privacyface": ALBUMS,
    "cifar-fedavgm": CIFAR,
    "cifar-scaffold": [*CIFAR, "fed.algorithm=scaffold"],
    "cifar-secagg-dropouts": [*CIFAR, *SECAGG, "clients.dropout=0.15"],
    "cifar-secagg-refused": [*CIFAR, *SECAGG, "clients.dropout=0.5"],
    "cifar-secaggplus": [*CIFAR, *SECAGG[:1], "fed.secure_aggregation.mode=secagg+",
                         "fed.secure_aggregation.neighbours=4", "fed.secure_aggregation.seed=1"],
    "cifar-secagg-dp": [*CIFAR, *SECAGG, "fed.dp.enabled=true", "fed.dp.noise_multiplier=0.1", "fed.dp.clip=1.0"],
    "cifar-secagg-dp-dropouts": [*CIFAR, *SECAGG, "clients.dropout=0.15", "fed.dp.enabled=true",
                                 "fed.dp.noise_multiplier=0.1", "fed.dp.clip=1.0"],
}


if __name__ == "__main__":
    sys.exit(launch_and_digest(3, RUNS, *sys.argv[1:]))
