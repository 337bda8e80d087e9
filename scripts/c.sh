#!/usr/bin/env bash
# numalab for C and C++ (crates/numalab-c): builds libnumalab, installs it
# with numalab.h and numalab.pc into a prefix, and checks it as a C
# program sees it: the committed header is what the code generates, the
# soname, only numalab_ symbols exported, the examples built with
# pkg-config and run, and every call (errors included) under
# AddressSanitizer and UBSan.
#   scripts/c.sh                    build, install into target/c/prefix, check
#   scripts/c.sh --install PREFIX   build and install into PREFIX (as root for /usr/local)
#   scripts/c.sh --header           write crates/numalab-c/include/numalab.h from the code
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}
[[ $target = /* ]] || target="$PWD/$target"
prefix="$target/c/prefix"
mode=check
case "${1:-}" in
    --install) [[ $# -ge 2 ]] || { echo "c.sh: --install needs a prefix" >&2; exit 2; }; prefix=$2; mode=install ;;
    --header) mode=header ;;
    "") ;;
    *) echo "c.sh: unknown option $1 (expected --install PREFIX or --header)" >&2; exit 2 ;;
esac
for tool in cbindgen pkg-config cc c++; do
    command -v "$tool" >/dev/null || { echo "c.sh: $tool is missing (scripts/setup.sh --test installs it)" >&2; exit 1; }
done

header=crates/numalab-c/include/numalab.h
made="$target/c/numalab.h"
mkdir -p "$target/c"
cbindgen --quiet --config crates/numalab-c/cbindgen.toml --crate numalab-c --output "$made" crates/numalab-c
if [[ $mode == header ]]; then
    cp "$made" "$header"
    echo "c.sh: wrote $header" >&2
    exit 0
fi
if ! diff -u "$header" "$made" >&2; then
    echo "c.sh: $header differs from what the code generates: run scripts/c.sh --header" >&2
    exit 1
fi

cargo build --release --locked -q -p numalab-c
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
major=${version%%.*}
# A packager stages the files under DESTDIR and may put the library in
# its own LIBDIR (Debian: /usr/lib/x86_64-linux-gnu); numalab.pc names the
# final places.
libdir=${LIBDIR:-$prefix/lib}
lib="${DESTDIR:-}$libdir"
include="${DESTDIR:-}$prefix/include"
mkdir -p "$lib/pkgconfig" "$include"
install -m 0644 -s "$target/release/libnumalab_c.so" "$lib/libnumalab.so.$version"
ln -sf "libnumalab.so.$version" "$lib/libnumalab.so.$major"
ln -sf "libnumalab.so.$major" "$lib/libnumalab.so"
install -m 0644 "$target/release/libnumalab_c.a" "$lib/libnumalab.a"
strip --strip-debug "$lib/libnumalab.a"
install -m 0644 "$header" "$include/numalab.h"
cat > "$lib/pkgconfig/numalab.pc" <<PC
prefix=$prefix
libdir=$libdir
includedir=\${prefix}/include

Name: numalab
Description: place memory and threads on NUMA nodes, find where pages are, move data through a NUMA-placed ring
Version: $version
Libs: -L\${libdir} -lnumalab
Libs.private: -lhwloc -ludev -lpthread -ldl -lm -lgcc_s
Cflags: -I\${includedir}
PC
echo "c.sh: installed libnumalab $version into $prefix" >&2
[[ $mode == install ]] && exit 0

so="$lib/libnumalab.so.$version"
soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[[ $soname == "libnumalab.so.$major" ]] || { echo "c.sh: soname is '$soname', not libnumalab.so.$major" >&2; exit 1; }
leaked=$(nm -D --defined-only "$so" | awk '{print $3}' | grep -v '^numalab_' || true)
[[ -z $leaked ]] || { echo "c.sh: libnumalab exports symbols other than numalab_*: $leaked" >&2; exit 1; }
echo "c.sh: soname $soname, $(nm -D --defined-only "$so" | wc -l) symbols exported, all numalab_*" >&2

export PKG_CONFIG_PATH="$lib/pkgconfig"
build="$target/c/build"
mkdir -p "$build"
cc -std=c11 -Wall -Wextra -Werror examples/c/place.c $(pkg-config --cflags --libs numalab) -o "$build/place"
c++ -std=c++17 -Wall -Wextra -Werror examples/c/place.cpp $(pkg-config --cflags --libs numalab) -o "$build/place++"
c++ -std=c++17 -Wall -Wextra -Werror -pthread examples/c/ring.cpp $(pkg-config --cflags --libs numalab) -o "$build/ring++"
cc -std=c11 -Wall -Wextra -Werror examples/c/place.c $(pkg-config --cflags numalab) \
    "$lib/libnumalab.a" $(pkg-config --static --libs-only-l numalab | sed 's/-lnumalab//') -o "$build/place-static"
cc -std=c11 -g -fsanitize=address,undefined -fno-omit-frame-pointer crates/numalab-c/tests/calls.c \
    $(pkg-config --cflags --libs numalab) -o "$build/calls"
cc -std=c11 -O2 -Wall -Wextra -Werror crates/numalab-c/tests/ring.c $(pkg-config --cflags --libs numalab) -o "$build/ring"
export LD_LIBRARY_PATH="$lib"
"$build/place"
"$build/place++"
"$build/place-static"
"$build/ring++"
# LeakSanitizer would report the Rust runtime's one-time allocations.
ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1 "$build/calls"

# The ring both ways with numalab ring's Rust workers, sequence-numbered
# words checked on the reading side.
cargo build -q --locked -p numalab-cli
numalab="$target/debug/numalab"
volume=$((40 * 65536 + 4096))
interop() { # ROLE_OF_C WORKER_ROLE
    local name="c-interop-$1-$$" pid
    "$build/ring" "$name" "$1" "$volume" &
    pid=$!
    # The worker opens the ring once the C side has made it.
    until [[ -e /dev/shm/numalab-ring.$name ]]; do
        kill -0 "$pid" 2>/dev/null || { wait "$pid"; return 1; }
        sleep 0.01
    done
    "$numalab" ring-worker --role "$2" --name "$name" --cpus 0 --mode copy --timeout 60 \
        --volume "$volume" --readers 1 --verify >"$build/worker-$2.json"
    wait "$pid"
    grep -q "\"bytes\":$volume" "$build/worker-$2.json" \
        || { echo "c.sh: the Rust $2 moved other than $volume bytes: $(cat "$build/worker-$2.json")" >&2; return 1; }
}
interop write reader
interop read writer
echo "c.sh: the ring both ways between C and numalab ring's Rust workers ($volume bytes each)" >&2
