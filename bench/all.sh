#!/usr/bin/env bash
# Every benchmark of the README against its references, in one go, and one
# Markdown table of what was met: the README's figures are this table's
# output, one table per kind of machine measured.
#
#   bash bench/all.sh [--quick] [--psrdada DIR] [--only NAMES] [-o FILE]
#
# Runs, in this order (each writes its full output beside the table):
#   ring        cargo bench -p numalab --bench ring (against the C ring in
#               bench/cring.c, and PSRDada when --psrdada or PSRDADA_BIN
#               gives its built programs or its source tree)
#   replicated  cargo bench -p numalab --bench replicated -- read
#   engine      bench/engine.sh (likwid-bench, the minimal random loop)
#   matrix      bench/matrix-quality.sh (bench/chase.c, likwid-bench)
#   profile     bench/profile.sh (sort bare and profiled) and
#               cargo bench -p numalab --bench profile (processes sampled
#               a second)
#   fleet       cargo bench -p numalab-bench --bench fleet (10 000 host
#               reports merged by numalab fleet)
#
# A benchmark, not a test: run it on a quiet machine (nothing else
# running; the load average is recorded before and after). It takes about
# half an hour on a 2-core VM; --quick (fewer repeats and rounds) about a
# third of that, for a first look only.
#
# The table names the CPU model, its vector and string-copy extensions,
# the last-level cache, the kernel and the date, and for each target the
# figures, the goal and met / missed / not measured. It is written to
# target/bench-all/summary.md (or -o FILE) and printed.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "bench/all.sh: $*" >&2; exit 1; }

quick=0
psrdada=${PSRDADA_BIN:-}
only="ring,replicated,engine,matrix,profile,fleet"
out=target/bench-all/summary.md
while [ $# -gt 0 ]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --quick) quick=1 ;;
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

if wanted ring; then
    echo "== ring (log: $logs/ring.log)" >&2
    ring_env=()
    [ "$quick" = 1 ] && ring_env+=(NUMALAB_BENCH_REPEATS=1 NUMALAB_BENCH_VOLUME=$((1 << 30)))
    if [ -n "$psrdada" ]; then
        # bench/psrdada.sh finds or builds PSRDada's programs, then runs the
        # ring benchmark with PSRDADA_BIN set.
        env "${ring_env[@]}" bash bench/psrdada.sh "$psrdada" 2>&1 | tee "$logs/ring.log"
    else
        env "${ring_env[@]}" cargo bench --locked -q -p numalab --bench ring 2>&1 | tee "$logs/ring.log"
    fi
fi
if wanted replicated; then
    echo "== replicated (log: $logs/replicated.log)" >&2
    args=(read)
    [ "$quick" = 1 ] && args+=(--quick)
    cargo bench --locked -q -p numalab --bench replicated -- "${args[@]}" 2>&1 | tee "$logs/replicated.log"
fi
if wanted engine; then
    echo "== engine (log: $logs/engine.log)" >&2
    bash bench/engine.sh "$([ "$quick" = 1 ] && echo 3 || echo 7)" 2>&1 | tee "$logs/engine.log"
fi
if wanted matrix; then
    echo "== matrix (log: $logs/matrix.log)" >&2
    ROUNDS=$([ "$quick" = 1 ] && echo 3 || echo 5) bash bench/matrix-quality.sh 2>&1 | tee "$logs/matrix.log"
fi
if wanted profile; then
    echo "== profile (log: $logs/profile.log)" >&2
    {
        bash bench/profile.sh 192 "$([ "$quick" = 1 ] && echo 5 || echo 11)"
        cargo bench --locked -q -p numalab --bench profile -- 1000 "$([ "$quick" = 1 ] && echo 3 || echo 7)"
    } 2>&1 | tee "$logs/profile.log"
fi
if wanted fleet; then
    echo "== fleet (log: $logs/fleet.log)" >&2
    cargo bench --locked -q -p numalab-bench --bench fleet 2>&1 | tee "$logs/fleet.log"
fi
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

{
    echo "### $machine"
    echo
    echo "$(uname -sr), extensions: ${extensions:-none of the listed}, last-level cache: ${llc:-unknown};"
    echo "measured $started with \`bash bench/all.sh$([ "$quick" = 1 ] && echo " --quick")\`,"
    echo "load average $load_before before, $load_after after."
    echo
    echo "| target | figures (numalab / reference) | goal | verdict |"
    echo "|---|---|---|---|"
    for name in ring replicated engine matrix profile fleet; do
        wanted "$name" || continue
        grep -h '^TARGET' "$logs/$name.log" | awk -F'\t' '{ printf "| %s | %s | %s | %s |\n", $2, $3, $4, $5 }' || true
    done
} >"$out.tmp"
mv "$out.tmp" "$out"
echo
cat "$out"
met=$(grep -c '| met |$' "$out" || true)
missed=$(grep -c '| missed |$' "$out" || true)
echo
echo "bench/all.sh: $met target(s) met, $missed missed; table in $out, full outputs in $logs/"
