#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser a user or another process feeds
# numalab (fuzz/fuzz_targets/), with libFuzzer on stable Rust.
#
#   bench/fuzz.sh DURATION [TARGET...]
#
# DURATION (10s, 10m, 1h, or seconds) is the total time, split evenly
# across the targets named (default: all). Before fuzzing, every input in
# fuzz/regressions/TARGET/ (crashes found and fixed) is run once.
#
#   corpus    target/fuzz-corpus/TARGET/     grows run to run; seeds in fuzz/seeds/TARGET/
#                                            (saved reports: tests/results/ too)
#   crashes   target/fuzz-crashes/TARGET/    crash-*, timeout-*, oom-* inputs
#
# NUMALAB_FUZZ_SEED=N makes libFuzzer's choices repeat from run to run
# (for the same corpus); by default they differ.
#
# Prints a table (target, seconds, runs, coverage, crashes) and one line per
# distinct crash (where it panicked or died); exits 1 when any input
# crashed, hung or ran out of memory. Reproduce one with
#   target/fuzz/x86_64-unknown-linux-gnu/release/TARGET target/fuzz-crashes/TARGET/crash-...
# (docs/testing.md, "Fuzzing").
set -euo pipefail
cd "$(dirname "$0")/.."

all_targets=(sets size hostlist experiment hwloc_xml result_json plot ring_segment saved_report fleet_host profile)

usage() {
    echo "usage: bench/fuzz.sh DURATION [TARGET...]   (DURATION: 30s, 10m, 1h; targets: ${all_targets[*]})" >&2
    exit 2
}

(($# >= 1)) || usage
case "$1" in
    -h | --help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
if [[ "$1" =~ ^([0-9]+)([smh]?)$ ]]; then
    case "${BASH_REMATCH[2]}" in
        h) total=$((BASH_REMATCH[1] * 3600)) ;;
        m) total=$((BASH_REMATCH[1] * 60)) ;;
        *) total=${BASH_REMATCH[1]} ;;
    esac
else
    echo "fuzz.sh: duration \"$1\" is not a number of seconds, minutes or hours (10s, 10m, 1h)" >&2
    usage
fi
shift
targets=("$@")
((${#targets[@]})) || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
    [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "fuzz.sh: no target \"$t\"; targets: ${all_targets[*]}" >&2; exit 2; }
done
((total >= ${#targets[@]})) || { echo "fuzz.sh: $total s is less than one second per target" >&2; exit 2; }
per=$((total / ${#targets[@]}))

# libfuzzer-sys builds libFuzzer with a C++ compiler.
scripts/setup.sh --fuzz

# libFuzzer's coverage instrumentation, with stable codegen flags only (what
# `cargo fuzz` passes, less the sanitizer, which needs nightly). The
# explicit --target keeps them off build scripts and proc macros.
triple=x86_64-unknown-linux-gnu
export RUSTFLAGS="-Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares \
--cfg fuzzing"
echo "fuzz.sh: building the fuzz targets (fuzz/)" >&2
cargo build --manifest-path fuzz/Cargo.toml --release --locked -q \
    --target "$triple" --target-dir target/fuzz
bin=target/fuzz/$triple/release

# Longest input per target: what a real input of its kind needs.
max_len() {
    case "$1" in
        sets | size) echo 256 ;;
        experiment) echo 8192 ;;
        ring_segment) echo 16384 ;;
        *) echo 131072 ;;
    esac
}

# Seed directories per target besides fuzz/seeds/TARGET/.
extra_seeds() {
    case "$1" in
        saved_report | fleet_host) echo tests/results ;;
    esac
}

# Extra libFuzzer options per target.
options() {
    case "$1" in
        experiment | result_json | plot | saved_report | fleet_host | profile) echo "-dict=fuzz/dict/numbers.dict" ;;
    esac
}

# Where an input crashed: the panic's location, or the first frame in
# numalab or a library for a signal.
signature() {
    local out
    out=$(timeout 60 "$bin/$1" "$2" 2>&1 || true)
    local panic
    panic=$(grep -m1 -o "panicked at [^ ]*" <<<"$out" | sed 's|^panicked at .*/crates/|crates/|' || true)
    if [[ -n "$panic" ]]; then
        echo "panic at ${panic#panicked at }"
    elif grep -q "ERROR: libFuzzer: timeout" <<<"$out" || [[ "$(basename "$2")" == timeout-* ]]; then
        echo "timeout (over 10 s for one input)"
    elif grep -q "out-of-memory" <<<"$out" || [[ "$(basename "$2")" == oom-* ]]; then
        echo "out of memory (over 2 GiB)"
    elif grep -q "Assertion .* failed" <<<"$out"; then
        echo "abort: $(grep -m1 -o "[^ ]*: Assertion .* failed" <<<"$out")"
    else
        # The first frame that is not the C library's.
        local frame
        frame=$(gdb -batch -ex run -ex bt --args "$bin/$1" "$2" 2>/dev/null |
            grep -E "^#[0-9]+ " | sed -E 's/^#[0-9]+ +(0x[0-9a-f]+ in )?//; s/ \(.*//' |
            grep -v -m1 -E "^(__|_IO_|raise|abort|gsignal|\?\?)" || true)
        echo "signal in ${frame:-unknown (install gdb for the frame)}"
    fi
}

scratch=$(mktemp -d "${TMPDIR:-/tmp}/numalab-fuzz.XXXXXX")
# The ring_segment target's segment files (numalab-ring.fuzz-PID, one per
# fuzzing process, left when libFuzzer exits) go with the scratch directory.
trap 'rm -rf "$scratch"; rm -f /dev/shm/numalab-ring.fuzz-*' EXIT
export NUMALAB_FUZZ_SCRATCH=$scratch

failed=0
rows=()
crash_lines=()
for t in "${targets[@]}"; do
    corpus=target/fuzz-corpus/$t
    crashes=target/fuzz-crashes/$t
    mkdir -p "$corpus" "$crashes"
    # Every input that once crashed, run once.
    if compgen -G "fuzz/regressions/$t/*" >/dev/null; then
        if ! "$bin/$t" -timeout=10 -rss_limit_mb=2048 fuzz/regressions/"$t"/* >"$scratch/$t.regressions.log" 2>&1; then
            failed=1
            crash_lines+=("$t: a regression input crashes again; see $scratch/$t.regressions.log:")
            crash_lines+=("$(grep -m3 -E 'Running:|panicked at|ERROR' "$scratch/$t.regressions.log" || true)")
            cp "$scratch/$t.regressions.log" "$crashes/regressions.log"
        fi
    fi
    before=$(find "$crashes" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
    echo "fuzz.sh: $t for ${per}s" >&2
    log=$scratch/$t.log
    # Fork mode: a crash or hang ends one job, not the target's time.
    set +e
    mkdir -p "fuzz/seeds/$t"
    "$bin/$t" "$corpus" "fuzz/seeds/$t" $(extra_seeds "$t") \
        -max_total_time="$per" -max_len="$(max_len "$t")" \
        -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$crashes/" \
        -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
        -seed="${NUMALAB_FUZZ_SEED:-0}" \
        $(options "$t") >"$log" 2>&1 # one word or none
    status=$?
    set -e
    last=$(grep -E '^#[0-9]+: cov:' "$log" | tail -n 1 || true)
    runs=$(sed -E 's/^#([0-9]+):.*/\1/' <<<"$last")
    cov=$(grep -o 'cov: [0-9]*' <<<"$last" | cut -d' ' -f2)
    ft=$(grep -o 'ft: [0-9]*' <<<"$last" | cut -d' ' -f2)
    after=$(find "$crashes" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
    new=$(comm -13 <(echo "$before") <(echo "$after") | sed '/^$/d')
    count=$(sed '/^$/d' <<<"$new" | wc -l)
    if ((status != 0 && count == 0)); then
        # Not a crash of an input: the fuzzer itself failed.
        failed=1
        crash_lines+=("$t: libFuzzer exited $status without a crash input; its log: $crashes/fuzz.log")
        cp "$log" "$crashes/fuzz.log"
    fi
    rows+=("$(printf '%-13s %6s %10s %7s %8s %7s' "$t" "$per" "${runs:-0}" "${cov:-?}" "${ft:-?}" "$count")")
    if ((count)); then
        failed=1
        cp "$log" "$crashes/fuzz.log"
        declare -A seen=()
        while read -r input; do
            sig=$(signature "$t" "$input")
            if [[ -z "${seen[$sig]:-}" ]]; then
                seen[$sig]=$input
                crash_lines+=("$t: $sig   e.g. $input")
            fi
        done <<<"$new"
        unset seen
    fi
done

echo
printf '%-13s %6s %10s %7s %8s %7s\n' target secs runs cov features crashes
printf '%s\n' "${rows[@]}"
if ((${#crash_lines[@]})); then
    echo
    echo "distinct crashes (reproduce: $bin/TARGET INPUT):"
    printf '  %s\n' "${crash_lines[@]}"
fi
exit "$failed"
