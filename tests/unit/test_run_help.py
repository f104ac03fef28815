"""`python -m fedmpi.run --help` speaks to a user: the common launches, the main settings with every rule of the
registry, --print-config, where the docs are; it starts no MPI."""
import subprocess
import sys

from fedmpi.algorithms.registry import RULES
from jobs.site import ROOT


def test_help_shows_launches_settings_and_docs():
    out = subprocess.run([sys.executable, "-m", "fedmpi.run", "--help"], capture_output=True, text=True, timeout=60,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    for shown in ("mpirun -n 5 python -m fedmpi.run --config configs/demo_cpu.yaml", "--resume auto",
                  "python -m fedmpi.run --print-config", "sbatch slurm/fedface_3party.sh", "fed.algorithm=NAME",
                  "fed.options.KEY=VALUE", "docs/BASELINES.md", "README.md", "docs/ARCHITECTURE.md"):
        assert shown in text, shown
    assert all(f" {name}," in text or f" {name} " in text for name in RULES)
    for path in ("configs/demo_cpu.yaml", "slurm/fedface_3party.sh", "docs/BASELINES.md", "docs/CLUSTER.md",
                 "docs/READ_A_RUN.md", "docs/WRITE_A_RULE.md"):
        assert (ROOT / path).exists(), path          # what it points to is there
