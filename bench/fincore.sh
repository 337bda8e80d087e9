#!/usr/bin/env bash
# numalab fincore against util-linux fincore, on the same cached files:
#
#   one large file, all of it cached         numalab fincore FILE  vs  fincore FILE
#   many small files, all cached (4 KiB)     numalab fincore DIR   vs  find DIR -type f -print0 | xargs -0 fincore
#
# fincore only asks mincore(2); numalab asks the same and then where each
# cached page is, so the ratio (fincore's time / numalab's) says what the
# per-node columns cost. Target (the issue): >= 0.9 for both. Rounds
# alternate which tool runs first; the figure is the median of the
# rounds' ratios. A benchmark, not a test: run it on a quiet machine with
# a few GiB free; it writes its files under target/bench-fincore and
# removes them at the end.
#
#   bash bench/fincore.sh [SIZE_GIB] [FILES] [ROUNDS]     (default 4 GiB, 100000 files, 5 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
gib=${1:-4}
files=${2:-100000}
rounds=${3:-5}
for n in "$gib" "$files" "$rounds"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "fincore.sh: SIZE_GIB, FILES and ROUNDS are positive whole numbers, not \"$n\"" >&2; exit 2; }
done
command -v fincore >/dev/null || { echo "fincore.sh: util-linux fincore is needed (apt-get install util-linux)" >&2; exit 2; }

cargo build --release --locked -q -p numalab-cli
numalab=$PWD/target/release/numalab
dir=$PWD/target/bench-fincore
rm -rf "$dir"
mkdir -p "$dir/small"
trap 'rm -rf "$dir"' EXIT INT TERM

echo "fincore.sh: writing a ${gib} GiB file and $files files of 4 KiB (cached: just written)" >&2
dd if=/dev/zero of="$dir/large" bs=1M count=$((gib * 1024)) status=none
head -c 4096 /dev/urandom > "$dir/page"
(cd "$dir/small" && for i in $(seq "$files"); do cp ../page "f$i"; done)
cat "$dir/large" > /dev/null

# Seconds a command takes, from bash's clock.
seconds() {
    local start end
    start=$(date +%s%N)
    "$@" > /dev/null
    end=$(date +%s%N)
    awk -v a="$start" -v b="$end" 'BEGIN { printf "%.6f\n", (b - a) / 1e9 }'
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }

large_ratios=() small_ratios=() large_n=() large_f=() small_n=() small_f=()
for round in $(seq "$rounds"); do
    if [ $((round % 2)) = 1 ]; then
        f=$(seconds fincore "$dir/large"); n=$(seconds "$numalab" fincore "$dir/large")
        fs=$(seconds sh -c "find '$dir/small' -type f -print0 | xargs -0 fincore"); ns=$(seconds "$numalab" fincore "$dir/small")
    else
        n=$(seconds "$numalab" fincore "$dir/large"); f=$(seconds fincore "$dir/large")
        ns=$(seconds "$numalab" fincore "$dir/small"); fs=$(seconds sh -c "find '$dir/small' -type f -print0 | xargs -0 fincore")
    fi
    large_n+=("$n") large_f+=("$f") small_n+=("$ns") small_f+=("$fs")
    large_ratios+=("$(awk -v a="$f" -v b="$n" 'BEGIN { print a / b }')")
    small_ratios+=("$(awk -v a="$fs" -v b="$ns" 'BEGIN { print a / b }')")
    printf 'round %d: large fincore %.3f s numalab %.3f s; small fincore %.3f s numalab %.3f s\n' "$round" "$f" "$n" "$fs" "$ns"
done
large=$(printf '%s\n' "${large_ratios[@]}" | median)
small=$(printf '%s\n' "${small_ratios[@]}" | median)
verdict() { awk -v r="$1" 'BEGIN { print (r >= 0.9 ? "met" : "missed") }'; }
printf 'TARGET\tnumalab fincore / util-linux fincore, one %s GiB cached file (speed)\t%.3f (medians %.3f s / %.3f s)\t>= 0.9\t%s\n' \
    "$gib" "$large" "$(printf '%s\n' "${large_f[@]}" | median)" "$(printf '%s\n' "${large_n[@]}" | median)" "$(verdict "$large")"
printf 'TARGET\tnumalab fincore / util-linux fincore, %s cached 4 KiB files (speed)\t%.3f (medians %.3f s / %.3f s)\t>= 0.9\t%s\n' \
    "$files" "$small" "$(printf '%s\n' "${small_f[@]}" | median)" "$(printf '%s\n' "${small_n[@]}" | median)" "$(verdict "$small")"
