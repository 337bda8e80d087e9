#!/usr/bin/env bash
# numalab's ring from C (libnumalab) against the minimal C ring
# (bench/cring.c) and against numalab's ring from Rust (the same program
# written against the Rust API: `ring-copy` of
# crates/numalab/benches/bindings_reference.rs), the same two processes
# and copies, in one run on this machine: 64 KiB to 256 MiB blocks, 8
# blocks a ring, writer on the first CPU, reader on the last. Targets: C
# through numalab >= 1.0x the C ring where the Rust ring is, and the same
# figures as the Rust ring within noise (the ABI adds nothing measurable
# per block). Each figure is the median of ROUNDS runs, the three taking
# turns at going first.
# A benchmark, not a test: run it on a quiet machine.
#   bash bench/c.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
[[ $target = /* ]] || target="$PWD/$target"
quick=0
[[ "${1:-}" == "--quick" ]] && quick=1
rounds=$([[ $quick == 1 ]] && echo 3 || echo 7)
volume=$([[ $quick == 1 ]] && echo $((1 << 30)) || echo $((4 << 30)))
volume=${NUMALAB_BENCH_VOLUME:-$volume}
prefix="$target/c/prefix"
bash scripts/c.sh --install "$prefix" >&2
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig" LD_LIBRARY_PATH="$prefix/lib"
bin="$target/c/bench"
mkdir -p "$bin"
cc -O2 -o "$bin/cring" bench/cring.c
cc -O2 -o "$bin/ring-c" bench/ring-c.c $(pkg-config --cflags --libs numalab)
cargo bench --locked -q -p numalab --bench bindings_reference --no-run 2>/dev/null
reference=$(ls -t "$target"/release/deps/bindings_reference-* | grep -v '\.d$' | head -1)
# The first and last CPU this process may use.
read -r wcpu rcpu < <(awk '/^Cpus_allowed_list/ {n = split($2, r, /[,-]/); print r[1], r[n]}' /proc/self/status)
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# One run of each: the C ring, C through numalab, Rust through numalab.
run() {
    case $1 in
    c) "$bin/cring" "$block" 8 "$volume" "$wcpu" "$rcpu" ;;
    n) "$bin/ring-c" "$block" 8 "$volume" "$wcpu" "$rcpu" ;;
    r) "$reference" ring-copy "$block" 8 "$volume" "$wcpu" "$rcpu" ;;
    esac
}
echo "== $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPU(s); $rounds rounds of $((volume >> 20)) MiB; writer CPU $wcpu, reader CPU $rcpu"
printf '| block | C ring MB/s | C through numalab MB/s | Rust through numalab MB/s | numalab from C / C ring | numalab from C / from Rust |\n|---|---|---|---|---|---|\n'
for kib in 64 256 1024 4096 16384 65536 262144; do
    block=$((kib << 10))
    declare -A got=([c]="" [n]="" [r]="")
    for ((round = 0; round < rounds; round++)); do
        case $((round % 3)) in
        0) order="c n r" ;;
        1) order="n r c" ;;
        *) order="r c n" ;;
        esac
        for side in $order; do
            got[$side]+="$(run "$side") "
        done
    done
    cm=$(printf '%s\n' ${got[c]} | median)
    nm=$(printf '%s\n' ${got[n]} | median)
    rm=$(printf '%s\n' ${got[r]} | median)
    awk -v k="$kib" -v c="$cm" -v n="$nm" -v r="$rm" \
        'BEGIN { printf "| %s KiB | %.0f | %.0f | %.0f | %.2f | %.2f |\n", k, c, n, r, n / c, n / r }'
done
