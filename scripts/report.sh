#!/usr/bin/env bash
# numalab's main job on this machine, from a fresh Debian machine: installs
# what is missing, builds numalab, and reports on this machine's NUMA:
# topology, latency and bandwidth between every CPU node and memory node
# beside the firmware's values, what memory placement costs a workload,
# and what it means; the same as one HTML page, figures inside, in
# numalab-report.html. Extra arguments go to `numalab report` (--quick).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
target/release/numalab report --html numalab-report.html "$@"
echo "also written: numalab-report.html" >&2
