#!/usr/bin/env bash
# numalab's main job on this machine, from a fresh Debian machine: installs
# what is missing, builds numalab, and reports on this machine's NUMA.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
numalab=target/release/numalab

"$numalab" topo
echo
# Latency and bandwidth from every CPU node to every memory node, each
# cell's pages checked to be on its node (seconds; drop --quick for a
# working set sized from the measured cache).
"$numalab" matrix --quick
