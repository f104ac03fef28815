#!/bin/bash
# FedFace 3-party setting (paper Sec. 4.2): MS1M on 8 GPUs, GA on 4, VGG on 4, plus the server
# (1 + 8 + 4 + 4 = 17 ranks, one GPU each; dedicated validators add ranks when fv.placement=dedicated).
#
#   sbatch slurm/fedface_3party.sh [--config FILE] [key=value ...]   the allocation below (8-GPU nodes)
#   slurm/fedface_3party.sh [--config FILE] [key=value ...]          sizes the allocation from the layout
#                                                                    and the site (slurm/site.env), submits
#   FEDMPI_CPU=1 slurm/fedface_3party.sh ...                         the same without GPUs (gloo)
# See docs/CLUSTER.md.
#
# Nodes of 8 GPUs: node 1 = MS1M's 8 ranks, node 2 = GA's 4 + VGG's 4, node 3 = the server.
#SBATCH --job-name=fedface-3party
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
fedmpi_main configs/fedface_3party.yaml fedface-3party "${BASH_SOURCE[0]}" "$@"
