#!/usr/bin/env bash
# Installs what numalab needs on a Debian or Ubuntu machine, then builds it.
#   scripts/setup.sh            build dependencies, release build
#   scripts/setup.sh --test     also the test tools (QEMU, two guest kernels: Debian 12's 6.1
#                               and its linux-image-6.12-amd64, busybox, reference tools,
#                               a C++ compiler for the fuzzer, python3 (with venv: the
#                               Python package's wheel is built and tested in one), cbindgen
#                               (numalab.h is checked against the code), man-db (the manual
#                               pages are rendered), dpkg-dev and lintian (the Debian
#                               packages are built and checked), sqlite3 and
#                               stress-ng: programs numalab profile is checked on,
#                               chromium: the HTML pages checked in a real browser, and
#                               slurmctld slurmd slurm-client munge: numalab fleet's batch
#                               script run by a real one-node Slurm), no build
#   scripts/setup.sh --fuzz     the build dependencies and a C++ compiler for libFuzzer
#                               (bench/fuzz.sh), no build
# Packages already installed are not installed again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(libhwloc-dev libudev-dev pkg-config numactl hwloc)
case "${1:-}" in
    --test) packages+=(qemu-system-x86 linux-image-amd64 linux-image-6.12-amd64 busybox-static cpio g++ gdb cbindgen man-db dpkg-dev lintian python3 python3-venv sqlite3 stress-ng chromium slurmctld slurmd slurm-client munge) ;;
    --fuzz) packages+=(g++ gdb) ;;
esac

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    sudo=""
    [[ "$(id -u)" -ne 0 ]] && sudo="sudo"
    echo "setup: installing ${missing[*]}" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
    echo "setup: cargo not found; install Rust from https://rustup.rs (1.89 or later)" >&2
    exit 1
fi
case "${1:-}" in
    --test) rustup component add rustfmt clippy >/dev/null 2>&1 || true ;;
    --fuzz) ;;
    *) cargo build --release --locked -q ;;
esac
