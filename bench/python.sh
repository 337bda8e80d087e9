#!/usr/bin/env bash
# The Python package against the same loops in Rust, in one run on this
# machine: a NumPy reader of the ring against a Rust reader (1 MiB to
# 64 MiB blocks: Python >= 0.9x), and numalab.locate of 1 GiB against the
# library's (<= 1.1x the time). A benchmark, not a test: run it on a quiet
# machine.
#   bash bench/python.sh [--quick] [--rounds N]
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
[[ $target = /* ]] || target="$PWD/$target"
bash scripts/python.sh --build >&2
"$target/py-venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps "$target"/wheels/numalab-*.whl
cargo build --release --locked -q -p numalab-cli
cargo bench --locked -q -p numalab --bench bindings_reference --no-run 2>/dev/null
reference=$(ls -t "$target"/release/deps/bindings_reference-* | grep -v '\.d$' | head -1)
"$target/py-venv/bin/python" bench/python_bench.py "$reference" "$target/release/numalab" "$@"
