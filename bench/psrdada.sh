#!/usr/bin/env bash
# Re-runs the ring benchmark against PSRDada, as the README's PSRDada
# figures were made: numalab's ring (copy in, copy out; and in place)
# beside PSRDada's dada_junkdb -z -> dada_dbnull -z [-l], pinned alike.
#
# PSRDada is not part of numalab and is never built or kept inside this
# repository: give either a directory holding its built programs, or its
# source tree, which is copied to and built in a temporary directory.
set -euo pipefail

PROGRAMS=(dada_db dada_junkdb dada_dbnull)

usage() {
    cat <<EOF
usage: bench/psrdada.sh [--keep] DIR

Runs \`cargo bench -p numalab --bench ring\` with PSRDADA_BIN set, so the
benchmark measures PSRDada's ${PROGRAMS[*]}
beside numalab's ring on the same CPUs.

DIR is either
  - a directory holding PSRDada's built ${PROGRAMS[*]}
    (or its bin/, apps/, build/apps/ or src/), or
  - a PSRDada source tree (CMakeLists.txt, or configure.ac / bootstrap):
    it is copied to a temporary directory outside this repository and
    built there (cmake, or autotools), then removed afterwards.

  --keep    keep the temporary build and print where it is
  -h, --help  this help

The benchmark's own settings pass through the environment:
NUMALAB_BENCH_REPEATS (the README used 5), NUMALAB_BENCH_BLOCKS (256K,64M),
NUMALAB_BENCH_VOLUME, NUMALAB_BENCH_COPY_STORES, NUMALAB_BENCH_HUGE_PAGES,
NUMALAB_BENCH_SAMPLES. PSRDada's programs are pinned with taskset.

Example:
  NUMALAB_BENCH_REPEATS=5 bench/psrdada.sh ~/src/psrdada
EOF
}

die() {
    echo "bench/psrdada.sh: $*" >&2
    exit 1
}

keep=0
dir=
while [ $# -gt 0 ]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --keep) keep=1 ;;
        -*) usage >&2; die "unknown option $1" ;;
        *)
            [ -z "$dir" ] || { usage >&2; die "one directory only (got $dir and $1)"; }
            dir=$1
            ;;
    esac
    shift
done
if [ -z "$dir" ]; then
    usage >&2
    exit 2
fi

repo=$(cd "$(dirname "$0")/.." && pwd -P)
[ -d "$dir" ] || die "$dir is not a directory"
dir=$(cd "$dir" && pwd -P)
command -v taskset >/dev/null || die "taskset is needed to pin PSRDada's programs (Debian: util-linux)"

inside_repo() {
    case "$1/" in
        "$repo"/*) return 0 ;;
        *) return 1 ;;
    esac
}

# The directory among DIR and its usual output folders that holds every
# program, if one does.
find_bin() {
    local base=$1 candidate program
    for candidate in "$base" "$base/bin" "$base/apps" "$base/build/apps" "$base/src"; do
        for program in "${PROGRAMS[@]}"; do
            [ -x "$candidate/$program" ] && [ -f "$candidate/$program" ] || continue 2
        done
        echo "$candidate"
        return 0
    done
    return 1
}

is_source() {
    [ -f "$1/CMakeLists.txt" ] || [ -f "$1/configure.ac" ] || [ -x "$1/bootstrap" ] || [ -x "$1/configure" ]
}

build() {
    local src=$1 tmp
    if inside_repo "$src"; then
        die "$src is inside the numalab repository ($repo); keep PSRDada's sources outside it"
    fi
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/numalab-psrdada.XXXXXX")
    tmp=$(cd "$tmp" && pwd -P)
    if inside_repo "$tmp"; then
        rmdir "$tmp"
        die "the temporary directory $tmp would be inside the repository; set TMPDIR elsewhere"
    fi
    build_dir=$tmp
    echo "building PSRDada from $src in $tmp" >&2
    cp -a "$src" "$tmp/src"
    if [ -f "$tmp/src/CMakeLists.txt" ]; then
        command -v cmake >/dev/null || die "cmake is needed to build PSRDada from $src"
        cmake -S "$tmp/src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release >&2
        cmake --build "$tmp/build" --parallel "$(nproc)" >&2
    else
        (
            cd "$tmp/src"
            if [ ! -x configure ]; then
                [ -x bootstrap ] || die "$src has neither configure nor bootstrap"
                ./bootstrap >&2
            fi
            ./configure >&2
            make -j "$(nproc)" >&2
        )
    fi
    local found program
    program=$(find "$tmp" -name dada_db -type f -perm -u+x -print -quit)
    [ -n "$program" ] || die "the build in $tmp made no dada_db"
    found=$(find_bin "$(dirname "$program")") || die "the build in $tmp made dada_db but not all of ${PROGRAMS[*]}"
    bin=$found
}

build_dir=
cleanup() {
    if [ -n "$build_dir" ]; then
        if [ "$keep" = 1 ]; then
            echo "PSRDada build kept in $build_dir" >&2
        else
            rm -rf "$build_dir"
        fi
    fi
}
trap cleanup EXIT

if bin=$(find_bin "$dir"); then
    echo "PSRDada programs: $bin" >&2
elif is_source "$dir"; then
    build "$dir"
else
    die "$dir holds neither PSRDada's programs (${PROGRAMS[*]}, also looked in bin/, apps/, build/apps/, src/) nor its sources (CMakeLists.txt, configure.ac or bootstrap)"
fi

cd "$repo"
PSRDADA_BIN=$bin cargo bench -p numalab --bench ring
