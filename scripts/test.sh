#!/usr/bin/env bash
# Runs every check numalab has, from a fresh Debian machine: installs what
# is missing, then formatting, lints, documentation, unit and integration
# tests. Exits non-zero on the first failure.
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
cargo test --workspace --locked
