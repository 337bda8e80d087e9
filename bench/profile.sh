#!/usr/bin/env bash
# What numalab profile costs the program it watches: GNU sort over a file
# of random lines, run bare and under `numalab profile` (default interval),
# rounds alternating which runs first; the figure is the median of the
# rounds' ratios (bare time / profiled time), with a 95% interval for the
# ratio of the geometric means (Welch's t on the logarithms, as
# `numalab sweep` compares). Target (the issue): the program runs at
# >= 0.98 of its bare speed. A benchmark, not a test: run it on a quiet
# machine. The lines live in /dev/shm when there is one (a file on disk
# may be read back from the disk in one run and not the next: noise
# larger than what is measured), else under target/bench-profile; both
# are removed at the end.
#
#   bash bench/profile.sh [MIB] [ROUNDS]      (default 256 MiB of lines, 11 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-256}
rounds=${2:-11}
for n in "$mib" "$rounds"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "profile.sh: MIB and ROUNDS are positive whole numbers, not \"$n\"" >&2; exit 2; }
done

cargo build --release --locked -q -p numalab-cli
numalab=$PWD/target/release/numalab
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    dir=$(mktemp -d /dev/shm/numalab-bench-profile.XXXXXX)
else
    dir=$PWD/target/bench-profile
    rm -rf "$dir"
    mkdir -p "$dir"
fi
trap 'rm -rf "$dir"' EXIT INT TERM
head -c $((mib * 1024 * 1024 * 3 / 4)) /dev/urandom | base64 -w 60 > "$dir/lines"
cat "$dir/lines" > /dev/null

seconds() {
    local start end
    start=$(date +%s%N)
    "$@" > /dev/null 2>&1
    end=$(date +%s%N)
    awk -v a="$start" -v b="$end" 'BEGIN { printf "%.6f\n", (b - a) / 1e9 }'
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }

job=(sort -S 2G -o "$dir/sorted" "$dir/lines")
ratios=() bare=() watched=()
for round in $(seq "$rounds"); do
    if [ $((round % 2)) = 1 ]; then
        b=$(seconds "${job[@]}"); w=$(seconds "$numalab" profile --json -o "$dir/profile.json" -- "${job[@]}")
    else
        w=$(seconds "$numalab" profile --json -o "$dir/profile.json" -- "${job[@]}"); b=$(seconds "${job[@]}")
    fi
    samples=$(python3 -c "import json; d = json.load(open('$dir/profile.json')); print(len(d['timeline']['samples']), round(d['timeline']['sampling_cpu_s'] * 1e3, 1))")
    bare+=("$b") watched+=("$w")
    ratios+=("$(awk -v a="$b" -v b="$w" 'BEGIN { print a / b }')")
    printf 'round %d: sort %.3f s bare, %.3f s profiled (samples, sampling CPU ms: %s)\n' "$round" "$b" "$w" "$samples"
done
ratio=$(printf '%s\n' "${ratios[@]}" | median)
interval=$(python3 - "${bare[*]}" "${watched[*]}" <<'PY'
import math, statistics, sys
a = [math.log(float(x)) for x in sys.argv[1].split()]
b = [math.log(float(x)) for x in sys.argv[2].split()]
if len(a) < 2:
    print("n/a"); sys.exit()
va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
df = (va + vb) ** 2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1)) if va + vb > 0 else 1e9
# Student's t 97.5% quantile by bisection on the distribution function.
def cdf(t, n):
    x = n / (n + t * t)
    # regularised incomplete beta by continued fraction (Numerical Recipes' betacf)
    def betacf(a, b, x):
        qab, qap, qam, c, d = a + b, a + 1, a - 1, 1.0, 1 - (a + b) * x / (a + 1)
        d = 1 / (d if abs(d) > 1e-300 else 1e-300); h = d
        for m in range(1, 300):
            m2 = 2 * m
            aa = m * (b - m) * x / ((qam + m2) * (a + m2))
            d = 1 + aa * d; c = 1 + aa / c; d = 1 / d; h *= d * c
            aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
            d = 1 + aa * d; c = 1 + aa / c; d = 1 / d; h *= d * c
        return h
    a_, b_ = n / 2, 0.5
    lbeta = math.lgamma(a_) + math.lgamma(b_) - math.lgamma(a_ + b_)
    ib = math.exp(a_ * math.log(x) + b_ * math.log(1 - x) - lbeta) * betacf(a_, b_, x) / a_
    return 1 - ib / 2 if t > 0 else ib / 2
lo, hi = 0.0, 100.0
for _ in range(100):
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if cdf(mid, df) < 0.975 else (lo, mid)
half = lo * math.sqrt(va + vb)
delta = statistics.mean(a) - statistics.mean(b)
print("%.3f to %.3f" % (math.exp(delta - half), math.exp(delta + half)))
PY
)
printf 'TARGET\tsort under numalab profile / sort bare, %s MiB of lines, %s rounds (speed)\t%.3f (medians %.3f s / %.3f s; 95%% interval %s)\t>= 0.98\t%s\n' \
    "$mib" "$rounds" "$ratio" "$(printf '%s\n' "${bare[@]}" | median)" "$(printf '%s\n' "${watched[@]}" | median)" "$interval" \
    "$(awk -v r="$ratio" 'BEGIN { print (r >= 0.98 ? "met" : "missed") }')"
