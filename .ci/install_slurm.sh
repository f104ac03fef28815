#!/usr/bin/env bash
# Install what the Slurm tests need (Debian packages): controller, node daemon, client tools, munge for
# authentication and PMIx for `srun --mpi=pmix`; iproute2 (`ip`) for the multi-node bed's namespaces and bridge. Idempotent (a no-op when all are there) and quiet (apt's
# output is shown only when it fails). The packages' own services are not used: tests/support/slurm_cluster.py
# starts its own daemons with its own configuration.
set -euo pipefail

packages=(slurmctld slurmd slurm-client munge libpmix-dev iproute2)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ "${#missing[@]}" -eq 0 ] && exit 0

as_root=()
[ "$(id -u)" -eq 0 ] || as_root=(sudo)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export DEBIAN_FRONTEND=noninteractive
if ! { "${as_root[@]}" apt-get update -qq && \
       "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "install_slurm.sh: could not install ${missing[*]}" >&2
    exit 1
fi
for service in munge slurmctld slurmd; do
    "${as_root[@]}" service "$service" stop >/dev/null 2>&1 || true
done
echo "install_slurm.sh: installed ${missing[*]}"
