#!/usr/bin/env bash
# Every benchmark of the README against its references, in one go, and one
# Markdown table of verdicts that hold at 95%: the README's figures are
# this table's output, one table per kind of machine measured.
#
#   bash bench/all.sh [--quick] [--looks N] [--psrdada DIR] [--only NAMES] [-o FILE]
#
# Runs, in this order (each writes its full output beside the table):
#   ring        cargo bench -p numalab --bench ring (against the C ring in
#               bench/cring.c, the library's ring against the command's,
#               and PSRDada when --psrdada or PSRDADA_BIN gives its built
#               programs or its source tree)
#   replicated  cargo bench -p numalab --bench replicated -- read
#   engine      bench/engine.sh (likwid-bench, the minimal random loop)
#   matrix      bench/matrix-quality.sh (bench/chase.c, likwid-bench)
#   profile     bench/profile.sh (sort bare and profiled) and
#               cargo bench -p numalab --bench profile (processes sampled
#               a second)
#   fleet       cargo bench -p numalab-bench --bench fleet (10 000 host
#               reports merged by numalab fleet)
#
# Each benchmark prints its goals and one figure per round (a ratio taken
# within the round, its two sides measured back to back in alternating
# order). A look runs every benchmark once; the benchmarks with a target
# whose 95% interval still straddles its goal run again, up to N looks
# (default 4, 2 with --quick), and each look's rounds join the ones
# before. Intervals are made at Pocock's level for N looks, as `numalab
# sweep` makes them, so whichever look settles a target its interval
# holds at 95% (crates/numalab-bench/src/goals.rs). A target is met
# (its interval inside the goal), missed (wholly outside) or level (still
# straddling after the last look: within noise of the goal).
#
# A benchmark, not a test: run it on a quiet machine (nothing else
# running; the load average is recorded before and after). One look
# takes about twenty minutes on a 2-core VM; --quick about a third of
# that, for a first look only.
#
# The table names the CPU model, its vector and string-copy extensions,
# the last-level cache, the kernel and the date, and for each target its
# figure with the interval, the goal, the rounds and the verdict. It is
# written to target/bench-all/summary.md (or -o FILE) and printed.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,41p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "bench/all.sh: $*" >&2; exit 1; }

# As given, for the table's header (a --psrdada path is shortened to "…").
invocation=
if [ $# -gt 0 ]; then invocation=$(printf ' %s' "$@" | sed -E 's/(--psrdada) [^ ]+/\1 …/'); fi
quick=0
looks=
psrdada=${PSRDADA_BIN:-}
only="ring,replicated,engine,matrix,profile,fleet"
out=target/bench-all/summary.md
while [ $# -gt 0 ]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --quick) quick=1 ;;
        --looks) [ $# -ge 2 ] || die "--looks needs a number"; looks=$2; shift ;;
        --psrdada) [ $# -ge 2 ] || die "--psrdada needs a directory"; psrdada=$2; shift ;;
        --only) [ $# -ge 2 ] || die "--only needs names (ring,replicated,engine,matrix,profile,fleet)"; only=$2; shift ;;
        -o) [ $# -ge 2 ] || die "-o needs a file"; out=$2; shift ;;
        *) usage >&2; die "unknown argument $1" ;;
    esac
    shift
done
for name in ${only//,/ }; do
    case "$name" in
        ring | replicated | engine | matrix | profile | fleet) ;;
        *) die "unknown benchmark $name (expected ring, replicated, engine, matrix, profile, fleet)" ;;
    esac
done
if [ -z "$looks" ]; then looks=$([ "$quick" = 1 ] && echo 2 || echo 4); fi
[[ "$looks" =~ ^[1-9][0-9]*$ ]] && [ "$looks" -le 20 ] || die "--looks $looks: expected 1 to 20"
wanted() { [[ ",$only," == *",$1,"* ]]; }
[ -z "$psrdada" ] || [ -d "$psrdada" ] || die "--psrdada $psrdada is not a directory"

logs=target/bench-all
mkdir -p "$logs"
flags=$(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2)
has() { if [[ " $flags " == *" $1 "* ]]; then echo "$1"; fi; }
extensions=$(for f in avx512f avx512bw avx2 fma sse4_2 erms fsrm; do has "$f"; done | xargs)
llc=$(lscpu -C=LEVEL,ONE-SIZE 2>/dev/null | awk 'NR > 1 { l = "L" $1 " " $2 " per instance" } END { print l }' || true)
machine="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPU(s)"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u +%Y-%m-%dT%H:%MZ)

cargo build --release --locked -q -p numalab-cli
cargo build --release --locked -q -p numalab-bench --example goals
goals() { "${CARGO_TARGET_DIR:-target}/release/examples/goals" --looks "$looks" "$@" "$logs"; }

# One look at benchmark $1: its output, GOAL and ROUND lines included, in
# $logs/NAME.lookN.log.
run() {
    local name=$1 look=$2
    local log=$logs/$name.look$look.log
    echo "== $name, look $look of at most $looks (log: $log)" >&2
    case "$name" in
        ring)
            ring_env=()
            [ "$quick" = 1 ] && ring_env+=(NUMALAB_BENCH_REPEATS=2 NUMALAB_BENCH_VOLUME=$((1 << 30)))
            if [ -n "$psrdada" ]; then
                # bench/psrdada.sh finds or builds PSRDada's programs, then
                # runs the ring benchmark with PSRDADA_BIN set.
                env "${ring_env[@]}" bash bench/psrdada.sh "$psrdada" 2>&1 | tee "$log"
            else
                env "${ring_env[@]}" cargo bench --locked -q -p numalab --bench ring 2>&1 | tee "$log"
            fi
            ;;
        replicated)
            args=(read)
            [ "$quick" = 1 ] && args+=(--quick)
            cargo bench --locked -q -p numalab --bench replicated -- "${args[@]}" 2>&1 | tee "$log"
            ;;
        engine) bash bench/engine.sh "$([ "$quick" = 1 ] && echo 3 || echo 5)" 2>&1 | tee "$log" ;;
        matrix) ROUNDS=$([ "$quick" = 1 ] && echo 3 || echo 5) bash bench/matrix-quality.sh 2>&1 | tee "$log" ;;
        profile)
            {
                bash bench/profile.sh 192 "$([ "$quick" = 1 ] && echo 4 || echo 8)"
                cargo bench --locked -q -p numalab --bench profile -- 1000 "$([ "$quick" = 1 ] && echo 3 || echo 5)"
            } 2>&1 | tee "$log"
            ;;
        fleet) cargo bench --locked -q -p numalab-bench --bench fleet 2>&1 | tee "$log" ;;
    esac
}

rm -f "$logs"/*.look*.log
todo=()
for name in ring replicated engine matrix profile fleet; do
    if wanted "$name"; then todo+=("$name"); fi
done
taken=0
for look in $(seq "$looks"); do
    for name in "${todo[@]}"; do
        run "$name" "$look"
    done
    taken=$look
    # Again only the benchmarks with a target whose interval still
    # straddles its goal.
    mapfile -t todo < <(goals --open)
    [ "${#todo[@]}" -gt 0 ] || break
    echo "bench/all.sh: after look $look, still open: ${todo[*]}" >&2
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

{
    echo "### $machine"
    echo
    echo "$(uname -sr), extensions: ${extensions:-none of the listed}, last-level cache: ${llc:-unknown};"
    echo "measured $started with \`bash bench/all.sh$invocation\`,"
    echo "load average $load_before before, $load_after after; $taken of at most $looks looks."
    echo "Each figure is the geometric mean of its rounds (each a ratio taken within"
    echo "one round, or a rate or time) with an interval that holds at 95% over all"
    echo "the looks (Pocock's boundary for $looks looks); a cell still straddling its"
    echo "goal after the last look is level: within noise of it."
    echo
    echo "| target | figure (95% interval) | goal | rounds | verdict |"
    echo "|---|---|---|---|---|"
    goals
} >"$out.tmp"
mv "$out.tmp" "$out"
echo
cat "$out"
verdicts=$(grep '^| ' "$out" | awk -F' [|] ' '{ print $NF }')
count() { grep -c "$1" <<<"$verdicts" || true; }
echo
echo "bench/all.sh: $(count "^met") met, $(count '^level') level, $(count '^missed') missed, $(count '^not measured') not measured; table in $out, full outputs in $logs/"
