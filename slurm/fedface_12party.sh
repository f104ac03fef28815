#!/bin/bash
# FedFace 12-party setting (paper Sec. 4.2, Fig. 4 (f)): MS1M, GA and VGG each split into 4 parties;
# each MS1M part on 2 GPUs, each GA and VGG part on 1, plus the server (1 + 16 = 17 ranks, one GPU each).
#
#   sbatch slurm/fedface_12party.sh [--config FILE] [key=value ...]  the allocation below (8-GPU nodes)
#   slurm/fedface_12party.sh [--config FILE] [key=value ...]         sizes the allocation from the layout
#                                                                    and the site (slurm/site.env), submits
#   FEDMPI_CPU=1 slurm/fedface_12party.sh ...                        the same without GPUs (gloo)
# See docs/CLUSTER.md.
#
# Nodes of 8 GPUs: node 1 = the 4 MS1M parts (2 ranks each), node 2 = the 4 GA + 4 VGG parts, node 3 = the server.
#SBATCH --job-name=fedface-12party
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=8
#SBATCH --gres=gpu:8
#SBATCH --signal=B:USR1@300
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=slurm-%x-%j.out

root="${FEDMPI_ROOT:-}"
if [ -z "$root" ] && [ -n "${SLURM_JOB_ID:-}" ]; then
    script=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | sed -n 's/^ *Command=\([^ ]*\).*/\1/p' | head -n1)
    [ -f "$script" ] && root="$(dirname "$script")/.."
fi
root="${root:-$(dirname "${BASH_SOURCE[0]}")/..}"
# shellcheck source=slurm/lib.sh
source "$root/slurm/lib.sh" || { echo "fedmpi: cannot find slurm/lib.sh under $root (set FEDMPI_ROOT)" >&2; exit 1; }
fedmpi_main configs/fedface_12party.yaml fedface-12party "${BASH_SOURCE[0]}" "$@"
