"""Every rank: generate the missing synthetic sets of a config with several ranks (fedmpi/data/preparation.py).

    mpirun -n N python tests/support/mpi_scripts/generate_data.py KEY=VALUE ...
"""
import sys

from mpi4py import MPI

from fedmpi.config import load_config
from fedmpi.data.preparation import generate_missing
from fedmpi.layout import build_layout

cfg = load_config(None, sys.argv[1:])
generate_missing(cfg, build_layout(cfg), MPI.COMM_WORLD, validation=True)
