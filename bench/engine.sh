#!/usr/bin/env bash
# numalab's experiment engine against reference tools, measured in one run
# on this machine, on the same working set (at least 4x the effective
# last-level cache, 1 GiB per thread by default) and thread count:
#
#   sequential read bandwidth   numalab run (pattern sequential) vs likwid-bench load_avx512 (or load_avx)
#   copy bandwidth              numalab run (pattern copy)       vs likwid-bench copy_avx512 (or copy_avx)
#   random 64-byte reads        numalab's engine vs a minimal loop with the same generator
#
# Targets: every ratio (numalab / reference) >= 0.95. Both sides count a
# copy's read and write bytes, as likwid-bench does. Rounds alternate
# which side runs first; the table shows each ratio as the median of the
# rounds' ratios, and the last lines give every round's ratio (GOAL and
# ROUND lines) for bench/all.sh to judge at 95%.
# A benchmark, not a test: run it on a quiet machine.
#
#   bash bench/engine.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}

if ! command -v likwid-bench >/dev/null; then
    echo "installing likwid (likwid-bench)" >&2
    apt-get install -y likwid >&2 || { echo "bench: cannot install likwid; run as root: apt-get install likwid" >&2; exit 1; }
fi
for tool in jq awk; do
    command -v "$tool" >/dev/null || apt-get install -y "$tool" >&2
done

cargo build --release --locked -q -p numalab-cli
cargo bench --locked -q -p numalab-bench --bench engine --no-run 2>/dev/null
# cargo builds where CARGO_TARGET_DIR says, when it is set.
numalab=${CARGO_TARGET_DIR:-target}/release/numalab
engine() { cargo bench --locked -q -p numalab-bench --bench engine -- "$@"; }

threads=$(nproc)
isa=avx
grep -qw avx512f /proc/cpuinfo && isa=avx512
echo "== machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $threads CPU(s), kernels *_$isa"

echo "== effective last-level cache"
llc_out=$(engine llc)
echo "$llc_out"
llc=$(awk '/^effective_llc_bytes/ {print $2}' <<<"$llc_out")
per_thread=$((1 << 30))
if (( per_thread < 4 * llc )); then per_thread=$((4 * llc)); fi
echo "working set: $((per_thread >> 20)) MiB per thread ($(( 4 * llc >> 20 )) MiB = 4x effective LLC), $threads thread(s)"

# likwid-bench sizes are in units of 1000; it splits the working set over
# its threads (and over the two arrays of a copy).
total_kb=$(( per_thread * threads / 1000 ))

likwid() { # kernel -> MByte/s
    likwid-bench -t "$1" -w "N:${total_kb}kB:${threads}" 2>/dev/null | awk '/^MByte\/s:/ {print $2}'
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
experiment() { # pattern passes -> file
    local ops=$(( $2 * threads * per_thread / (1 << 20) ))
    cat > "$tmp/$1.toml" <<TOML
name = "bench-$1"
[threads]
count = $threads
[memory]
size = $per_thread
sharing = "per-thread"
policy = "local"
huge_pages = "none"
[access]
pattern = "$1"
op_size = "1MiB"
ops = $ops
[run]
repeats = 3
warmup = 1
counters = false
TOML
    echo "$tmp/$1.toml"
}
numalab_mbs() { # experiment file -> MB/s (median of its repeats)
    "$numalab" run "$1" --json 2>/dev/null | jq '.figures.gb_per_s.median * 1000'
}

seq_file=$(experiment sequential 8)
copy_file=$(experiment copy 8)
declare -a lr nr lc nc rr rc
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
for ((r = 0; r < rounds; r++)); do
    # Alternate which side goes first, so drift in the machine's load
    # favours neither.
    if (( r % 2 == 0 )); then
        lr+=("$(likwid "load_$isa")");  nr+=("$(numalab_mbs "$seq_file")")
        lc+=("$(likwid "copy_$isa")");  nc+=("$(numalab_mbs "$copy_file")")
    else
        nr+=("$(numalab_mbs "$seq_file")"); lr+=("$(likwid "load_$isa")")
        nc+=("$(numalab_mbs "$copy_file")"); lc+=("$(likwid "copy_$isa")")
    fi
    rr+=("$(ratio "${nr[r]}" "${lr[r]}")"); rc+=("$(ratio "${nc[r]}" "${lc[r]}")")
    echo "round $r: read likwid ${lr[r]} numalab ${nr[r]} MB/s (${rr[r]}); copy likwid ${lc[r]} numalab ${nc[r]} MB/s (${rc[r]})"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "== random 64-byte reads"
random_out=$(engine random "$threads" "$per_thread" 20000000 "$rounds")
echo "$random_out"

lrm=$(median "${lr[@]}"); nrm=$(median "${nr[@]}")
lcm=$(median "${lc[@]}"); ncm=$(median "${nc[@]}")
rrm=$(median "${rr[@]}"); rcm=$(median "${rc[@]}")
loop=$(awk '/^median:/ {print $3}' <<<"$random_out")
eng=$(awk '/^median:/ {print $6}' <<<"$random_out")
paired=$(awk '/^ratio_random_reads/ {print $2}' <<<"$random_out")

echo
echo "== numalab / reference (medians of $rounds rounds; ratio = median of the rounds' ratios; target >= 0.95)"
printf '%-24s %14s %14s %8s\n' "" numalab reference ratio
printf '%-24s %9.0f MB/s %9.0f MB/s %8s\n' "sequential read" "$nrm" "$lrm" "$rrm   (likwid-bench load_$isa)"
printf '%-24s %9.0f MB/s %9.0f MB/s %8s\n' "copy" "$ncm" "$lcm" "$rcm   (likwid-bench copy_$isa)"
printf '%-24s %7.2f Mops/s %7.2f Mops/s %8s\n' "random 64-byte reads" "$eng" "$loop" "$paired   (minimal loop, same generator; median of paired rounds)"

# For bench/all.sh: each target's goal and every round's ratio, taken
# within the round (bench/all.sh judges them at 95%).
goal() { printf 'GOAL\t%s\t\t>= 0.95\n' "$1"; }
rounds() { local name=$1; shift; printf "ROUND\t$name\t\t%s\n" "$@"; }
seq_target="engine sequential read / likwid-bench load_$isa"
copy_target="engine copy / likwid-bench copy_$isa"
random_target="engine random 64-byte reads / minimal loop"
goal "$seq_target"; rounds "$seq_target" "${rr[@]}"
goal "$copy_target"; rounds "$copy_target" "${rc[@]}"
goal "$random_target"
# The engine benchmark's rounds: "  round 0: loop … Mops/s   engine … Mops/s   (1.002)".
mapfile -t random_ratios < <(awk '/^  round [0-9]+:/ { gsub(/[()]/, "", $NF); print $NF }' <<<"$random_out")
if [ "${#random_ratios[@]}" -gt 0 ]; then rounds "$random_target" "${random_ratios[@]}"; fi
