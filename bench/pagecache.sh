#!/usr/bin/env bash
# numalab pagecache bench against dd and fio reading the same cached file
# with the same block size and reader count, readers pinned to the same
# CPUs of the cache's node:
#
#   numalab pagecache bench FILE --readers R --block-size 8K
#   R x  taskset -c CPU dd if=FILE of=/dev/null bs=8K          (started together)
#   fio --rw=read --bs=8k --ioengine=psync --numjobs=R --invalidate=0 --cpus_allowed_policy=split
#
# The figure is the readers' combined throughput: R x the file's size over
# the time until the last reader finished — numalab's and fio's own
# clocks; for dd, bash's clock around the R processes (their start, about
# a millisecond, counts against dd). Rounds rotate which tool runs first;
# each ratio (numalab / other) is the median of the rounds'. Target (the
# issue): >= 0.95 against both. A benchmark, not a test: run it on a quiet
# machine; it writes one file under target/bench-pagecache and removes it.
#
#   bash bench/pagecache.sh [SIZE_MIB] [READERS…]     (default 1024 MiB; readers 1 and every CPU of the node, at most 4)
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-1024}
shift || true
[[ $mib =~ ^[1-9][0-9]*$ ]] || { echo "pagecache.sh: SIZE_MIB is a positive whole number, not \"$mib\"" >&2; exit 2; }
for tool in jq fio taskset dd; do
    command -v "$tool" >/dev/null || { echo "pagecache.sh: $tool is needed (apt-get install $tool)" >&2; exit 2; }
done
rounds=${ROUNDS:-7}

cargo build --release --locked -q -p numalab-cli
# cargo builds where CARGO_TARGET_DIR says, when it is set.
numalab=$(realpath -m "${CARGO_TARGET_DIR:-target}")/release/numalab
node=$("$numalab" topo --json | jq '[.topology.nodes[] | select(.memory_bytes > 0 and (.cpus | length) > 0)][0].id')
mapfile -t cpus < <("$numalab" topo --json | jq -r --argjson n "$node" '.topology.nodes[] | select(.id == $n) | .cpus[]')
if [ $# -gt 0 ]; then readers=("$@"); else
    all=${#cpus[@]}; [ "$all" -gt 4 ] && all=4
    readers=(1); [ "$all" -gt 1 ] && readers+=("$all")
fi
dir=$PWD/target/bench-pagecache
rm -rf "$dir"; mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT INT TERM
file=$dir/data
echo "pagecache.sh: writing $mib MiB, cached on node $node (readers on CPUs ${cpus[*]})" >&2
dd if=/dev/urandom of="$file" bs=1M count="$mib" status=none
sync "$file"
"$numalab" pagecache drop "$file" >/dev/null
"$numalab" pagecache load "$file" --node "$node" >/dev/null
bytes=$((mib << 20))

now() { date +%s%N; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }

# GB/s of R readers, each tool.
numalab_gbps() {
    "$numalab" pagecache bench "$file" --cache-node "$node" --reader-node same --readers "$1" \
        --block-size 8K --repeats 1 --no-matrix --json | jq '.cells[0].aggregate_gbps'
}
dd_gbps() {
    local r=$1 start end i
    start=$(now)
    for ((i = 0; i < r; i++)); do
        taskset -c "${cpus[$i]}" dd if="$file" of=/dev/null bs=8K status=none &
    done
    wait
    end=$(now)
    awk -v b="$bytes" -v r="$r" -v s="$start" -v e="$end" 'BEGIN { print r * b / (e - s) }'
}
fio_gbps() {
    local r=$1 list
    list=$(IFS=,; echo "${cpus[*]:0:$r}")
    fio --name=readers --filename="$file" --rw=read --bs=8k --ioengine=psync --numjobs="$r" \
        --invalidate=0 --cpus_allowed="$list" --cpus_allowed_policy=split --group_reporting \
        --output-format=json 2>/dev/null |
        jq '.jobs[0].read | .io_bytes / (.runtime / 1000) / 1e9'
}

for r in "${readers[@]}"; do
    n_all=() d_all=() f_all=() vs_dd=() vs_fio=()
    for round in $(seq "$rounds"); do
        case $((round % 3)) in
            1) n=$(numalab_gbps "$r"); d=$(dd_gbps "$r"); f=$(fio_gbps "$r") ;;
            2) d=$(dd_gbps "$r"); f=$(fio_gbps "$r"); n=$(numalab_gbps "$r") ;;
            0) f=$(fio_gbps "$r"); n=$(numalab_gbps "$r"); d=$(dd_gbps "$r") ;;
        esac
        n_all+=("$n") d_all+=("$d") f_all+=("$f")
        vs_dd+=("$(awk -v a="$n" -v b="$d" 'BEGIN { print a / b }')")
        vs_fio+=("$(awk -v a="$n" -v b="$f" 'BEGIN { print a / b }')")
        printf 'readers %d round %d: numalab %.2f GB/s, dd %.2f GB/s, fio %.2f GB/s\n' "$r" "$round" "$n" "$d" "$f"
    done
    verdict() { awk -v r="$1" 'BEGIN { print (r >= 0.95 ? "met" : "missed") }'; }
    nm=$(printf '%s\n' "${n_all[@]}" | median)
    for other in dd fio; do
        if [ $other = dd ]; then ratio=$(printf '%s\n' "${vs_dd[@]}" | median); om=$(printf '%s\n' "${d_all[@]}" | median)
        else ratio=$(printf '%s\n' "${vs_fio[@]}" | median); om=$(printf '%s\n' "${f_all[@]}" | median); fi
        printf 'TARGET\tpagecache bench / %s, %d reader(s), 8 KiB reads of a %d MiB cached file (throughput)\t%.3f (medians %.2f / %.2f GB/s)\t>= 0.95\t%s\n' \
            "$other" "$r" "$mib" "$ratio" "$nm" "$om" "$(verdict "$ratio")"
    done
done
