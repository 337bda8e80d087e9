#!/usr/bin/env bash
# Runs every check numalab has, from a fresh Debian machine: installs what
# is missing, then formatting, lints, documentation, unit and integration
# tests, a short run of the fuzz targets, and the emulated-NUMA suite
# (QEMU). Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test

step() { printf '\n== %s\n' "$*" >&2; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "rustdoc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked -q

step "cargo test"
cargo test --workspace --exclude numalab-emu --locked

step "Python package: the wheel built by maturin, its pytest suite against it (scripts/python.sh)"
scripts/python.sh

step "C and C++: libnumalab installed with numalab.h and numalab.pc, the examples, every call under ASan/UBSan (scripts/c.sh)"
scripts/c.sh

step "fuzzing: every parser's target for 5 s, and every regression input (bench/fuzz.sh)"
NUMALAB_FUZZ_SEED=1 bench/fuzz.sh 35s

step "emulated-NUMA suite: Linux under QEMU with each preset (crates/numalab-emu)"
# Every preset boots on two kernels: the newest before Linux 6.9 and the
# newest from 6.9 on (crates/numalab-emu/README.md). Debian installs kernel
# images readable by root only; give the suite readable copies when this
# user cannot read them and sudo can.
if [[ -z "${NUMALAB_EMU_KERNEL:-}" ]]; then
    older="" newer=""
    for kernel in $(ls -v /boot/vmlinuz-* 2>/dev/null); do
        IFS=. read -r major minor _ <<<"${kernel#/boot/vmlinuz-}"
        if ((major * 1000 + ${minor%%[!0-9]*} < 6009)); then older=$kernel; else newer=$kernel; fi
    done
    copies=()
    for kernel in $older $newer; do
        copy=$kernel
        if [[ ! -r "$kernel" ]]; then
            copy="$PWD/target/numalab-emu/$(basename "$kernel")"
            mkdir -p "$(dirname "$copy")"
            sudo -n install -m 0644 -o "$(id -u)" "$kernel" "$copy" 2>/dev/null || copy=$kernel
        fi
        copies+=("$copy")
    done
    if [[ " ${copies[*]} " == *"/target/numalab-emu/"* ]]; then
        NUMALAB_EMU_KERNEL=$(IFS=:; echo "${copies[*]}")
        export NUMALAB_EMU_KERNEL
    fi
fi
cargo test -p numalab-emu --locked

step "Debian packages: built, their files checked, lintian without errors (scripts/package.sh)"
scripts/package.sh --no-wheel

step "loom models of the ring's index protocol"
RUSTFLAGS="--cfg loom" cargo test -p numalab --release --lib --locked \
  --target-dir target/loom ring::protocol::loom_models

step "loom models of the replication protocols"
RUSTFLAGS="--cfg loom" cargo test -p numalab --lib --release --locked \
    --target-dir target/loom replicated::models
