#!/usr/bin/env bash
# Does a sweep's "≈ within noise" hold on this machine? Runs the same sweep
# of local, remote and interleave memory for 1 and 2 threads
# (examples/deck-exp1-small.toml, balanced) N times and counts the sweeps
# whose every difference from local is "≈". On a machine with one memory
# node the three policies place every page on the same node, so any
# difference such a sweep claims is noise; on a machine with several
# nodes the policies really differ and this script measures nothing (it
# says so and stops).
#
# Each sweep runs twice, interleaved (run.order = "interleaved", the
# default) and grouped (each cell's repeats back to back, as sweeps did
# before), in turn, so that both see the same minutes of the machine.
# Target: at least 19 of 20 interleaved sweeps call identical memory "≈".
#
# With MAX_REPEATS, the interleaved sweeps look at their differences again
# after every run.repeats rounds while one is "≈", up to MAX_REPEATS
# repeats (--max-repeats): identical memories never stop such a sweep
# early, so it runs every look, and the target checks that looking again
# does not make differences that are not there.
#
#   bash bench/sweep-noise.sh [SWEEPS] [MAX_REPEATS]
#       (default 20 sweeps, one look; about 20 s per pair, 4x that with
#       MAX_REPEATS four times run.repeats)
set -euo pipefail
cd "$(dirname "$0")/.."
sweeps=${1:-20}
most=${2:-}
[[ $sweeps =~ ^[1-9][0-9]*$ ]] || { echo "sweep-noise: SWEEPS must be a positive whole number, not \"$sweeps\"" >&2; exit 2; }
[[ -z $most || $most =~ ^[1-9][0-9]*$ ]] || { echo "sweep-noise: MAX_REPEATS must be a positive whole number, not \"$most\"" >&2; exit 2; }
command -v jq >/dev/null || apt-get install -y jq >&2

cargo build --release --locked -q -p numalab-cli
numalab=target/release/numalab
nodes=$("$numalab" topo --json | jq '[.topology.nodes[] | select(.memory_bytes > 0)] | length')
if [ "$nodes" != 1 ]; then
    echo "sweep-noise: this machine has $nodes nodes with memory: remote and interleave really differ from local here, so their differences are not noise; run this on a one-node machine" >&2
    exit 2
fi

# One sweep: "all-same" when every difference is ≈, else the differences
# it claimed, e.g. "remote/1 -12% [-20,-4]".
one() {
    local order=$1 json more=()
    [ -n "$most" ] && [ "$order" = interleaved ] && more=(--max-repeats "$most")
    json=$("$numalab" sweep examples/deck-exp1-small.toml --set threads.placement=balanced \
        --set run.order="$order" "${more[@]}" --json --no-plot 2>/dev/null)
    jq -r '
        [.comparison[]
         | select(.difference != null and .difference.verdict != "indistinguishable")
         | "\(.policy)/\(.settings | map(.[1]) | join(",")) \(.vs_local_percent | round)% [\(.difference.low * 100 | round),\(.difference.high * 100 | round)]"]
        | if length == 0 then "all-same" else join("; ") end' <<<"$json"
}

echo "sweep-noise: $sweeps sweeps of local, remote, interleave (one memory node: all the same memory), each interleaved${most:+ (up to $most repeats)} and grouped"
same_interleaved=0 same_grouped=0
for i in $(seq "$sweeps"); do
    a=$(one interleaved)
    b=$(one grouped)
    [ "$a" = all-same ] && same_interleaved=$((same_interleaved + 1))
    [ "$b" = all-same ] && same_grouped=$((same_grouped + 1))
    printf 'sweep %2d  interleaved: %-40s grouped: %s\n' "$i" "$a" "$b"
done
echo "interleaved: $same_interleaved of $sweeps sweeps called identical memory ≈ everywhere"
echo "grouped:     $same_grouped of $sweeps sweeps did"
verdict=missed
[ $((same_interleaved * 20)) -ge $((sweeps * 19)) ] && verdict=met
printf 'TARGET\tsweep of identical memories called ≈ (interleaved%s)\t%s of %s sweeps (grouped: %s)\t>= 19 of 20\t%s\n' \
    "${most:+, up to $most repeats}" "$same_interleaved" "$sweeps" "$same_grouped" "$verdict"
