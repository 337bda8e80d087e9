#!/usr/bin/env bash
# numalab's main job on this machine, from a fresh Debian machine: installs
# what is missing, builds numalab, and reports on this machine's NUMA.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
numalab=target/release/numalab

"$numalab" topo
# Until `numalab report` measures the node matrix: check that memory bound
# to each node lands there, with a command that fills a 64 MiB buffer.
for node in $("$numalab" topo --csv | awk -F, 'NR > 1 && $3 > 0 { print $1 }'); do
    "$numalab" exec --membind="$node" -- dd if=/dev/zero of=/dev/null bs=64M count=8 2>&1
done
