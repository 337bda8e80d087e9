#!/usr/bin/env bash
# Builds numalab's packages into target/package/ and checks them:
#   numalab_<version>_amd64.deb         the command, a manual page per command,
#                                       bash/zsh/fish completions, the guides and
#                                       the changelog under /usr/share/doc/numalab
#   libnumalab0_<version>_amd64.deb     the C library (libnumalab.so.0)
#   libnumalab-dev_<version>_amd64.deb  numalab.h, numalab.pc, libnumalab.so and .a
#   numalab-<version>-cp39-abi3-*.whl   the Python package
# Library dependencies are computed by dpkg-shlibdeps; each package's file
# list is checked, and lintian must report no error (its warnings are
# printed; docs/packaging.md says which are kept and why).
#
#   scripts/package.sh               build and check
#   scripts/package.sh --no-wheel    without the Python wheel (no python3-venv needed)
#
# Install:  sudo apt-get install ./target/package/numalab_*_amd64.deb
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
[[ $target = /* ]] || target="$PWD/$target"
wheel=1
for arg in "$@"; do
    case $arg in
        --no-wheel) wheel=0 ;;
        -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "package.sh: unknown option $arg (expected --no-wheel)" >&2; exit 2 ;;
    esac
done
for tool in cargo dpkg-deb dpkg-shlibdeps lintian gzip cbindgen; do
    command -v "$tool" >/dev/null || {
        echo "package.sh: $tool is missing (scripts/setup.sh --test installs it; dpkg-shlibdeps is in dpkg-dev)" >&2
        exit 1
    }
done

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
major=${version%%.*}
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
maintainer="numalab developers <numalab@users.noreply.github.com>"
homepage=$(sed -n 's/^repository = "\(.*\)"/\1/p' Cargo.toml | head -1)
out="$target/package"
work=$(mktemp -d "${TMPDIR:-/tmp}/numalab-package.XXXXXX")
trap 'rm -rf "$work"' EXIT
rm -rf "$out"
mkdir -p "$out"

cargo build --release --locked -q -p numalab-cli
numalab="$target/release/numalab"

# The copyright file every package carries (machine-readable, DEP 5).
copyright() {
    cat <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: numalab
Source: $homepage

Files: *
Copyright: 2026 numalab developers
License: MIT or Apache-2.0

License: MIT
 Permission is hereby granted, free of charge, to any person obtaining a copy
 of this software and associated documentation files (the "Software"), to deal
 in the Software without restriction, including without limitation the rights
 to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
 copies of the Software, and to permit persons to whom the Software is
 furnished to do so, subject to the following conditions:
 .
 The above copyright notice and this permission notice shall be included in
 all copies or substantial portions of the Software.
 .
 THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
 IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
 FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
 AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
 LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
 OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN
 THE SOFTWARE.

License: Apache-2.0
 On Debian systems, the full text of the Apache License, Version 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
EOF
}

# CHANGELOG.md as a Debian changelog (what dpkg and lintian read): one
# entry per version, a line per item.
debian_changelog() {
    local package=$1
    awk -v package="$package" -v maintainer="$maintainer" '
        # An item as "  * text", wrapped at 78 columns, continued by 4 spaces.
        function flush_item(   n, words, i, line) {
            if (item == "") return
            n = split(item, words, " "); line = "  *"
            for (i = 1; i <= n; i++) {
                if (length(line) + 1 + length(words[i]) > 78) { print line; line = "   " }
                line = line " " words[i]
            }
            print line; item = ""
        }
        function close_entry() {
            flush_item()
            if (entry) { print ""; print " -- " maintainer "  " when; print "" }
        }
        # Changes not yet released belong to no version: the package is
        # the version it says, the top entry must be that version.
        /^## Unreleased/ { close_entry(); entry = 0; next }
        /^## / {
            close_entry()
            split($0, f, " ")
            cmd = "date -R -u -d " f[4] "T12:00:00Z"; cmd | getline when; close(cmd)
            print package " (" f[2] ") unstable; urgency=medium"; print ""
            entry = 1; next
        }
        !entry { next }
        /^### / { flush_item(); next }
        /^- / { flush_item(); item = substr($0, 3); next }
        /^ +[^ ]/ && item != "" { sub(/^ +/, ""); item = item " " $0; next }
        /^[^ -]/ { item = (item == "" ? $0 : item " " $0); next }
        !NF { flush_item() }
        END { close_entry() }
    ' CHANGELOG.md
}

# The doc directory of a package: copyright, changelog.gz.
docdir() {
    local package=$1 root=$2
    local doc="$root/usr/share/doc/$package"
    mkdir -p "$doc"
    copyright > "$doc/copyright"
    debian_changelog "$package" | gzip -9n > "$doc/changelog.gz"
}

# DEBIAN/control for a staged root: size from the files, the rest given.
control() {
    local root=$1 package=$2 depends=$3 section=$4 summary=$5 long=$6
    mkdir -p "$root/DEBIAN"
    {
        echo "Package: $package"
        echo "Version: $version"
        echo "Architecture: $arch"
        echo "Maintainer: $maintainer"
        echo "Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)"
        [[ -n $depends ]] && echo "Depends: $depends"
        [[ $package == libnumalab0 ]] && echo "Multi-Arch: same"
        echo "Section: $section"
        echo "Priority: optional"
        echo "Homepage: $homepage"
        echo "Description: $summary"
        fmt -w 72 <<<"$long" | sed 's/^/ /'
    } > "$root/DEBIAN/control"
}

# The Depends of the ELF files given, computed by dpkg-shlibdeps from the
# libraries they link (libc6, libhwloc15, libudev1, libgcc-s1).
shlibdeps() {
    mkdir -p "$work/shlibs/debian"
    printf 'Source: numalab\n\nPackage: numalab\nArchitecture: any\n' > "$work/shlibs/debian/control"
    (cd "$work/shlibs" && dpkg-shlibdeps -O "$@" 2>/dev/null) | sed -n 's/^shlibs:Depends=//p'
}

build() {
    local root=$1 name=$2
    find "$root" -type d -exec chmod 0755 {} +
    (cd "$root" && find usr -type f -print0 | sort -z | xargs -0 md5sum > DEBIAN/md5sums)
    dpkg-deb --root-owner-group -Zxz --build "$root" "$out/$name" >/dev/null
    echo "package.sh: built $name ($(du -k "$out/$name" | cut -f1) KiB)" >&2
}

# numalab: the command.
root="$work/numalab"
install -D -m 0755 -s "$numalab" "$root/usr/bin/numalab"
strip --remove-section=.comment --remove-section=.note "$root/usr/bin/numalab"
"$numalab" manpages "$work/man" 2>/dev/null
mkdir -p "$root/usr/share/man/man1"
for page in "$work"/man/*.1; do
    gzip -9n < "$page" > "$root/usr/share/man/man1/$(basename "$page").gz"
done
install -d "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
    "$root/usr/share/fish/vendor_completions.d"
"$numalab" completions bash > "$root/usr/share/bash-completion/completions/numalab"
"$numalab" completions zsh > "$root/usr/share/zsh/vendor-completions/_numalab"
"$numalab" completions fish > "$root/usr/share/fish/vendor_completions.d/numalab.fish"
docdir numalab "$root"
install -m 0644 README.md CHANGELOG.md "$root/usr/share/doc/numalab/"
install -d "$root/usr/share/doc/numalab/docs"
install -m 0644 docs/*.md "$root/usr/share/doc/numalab/docs/"
# `--open` tries sensible-browser among the browsers it looks for (lintian
# reads the name in the binary and asks for the package that has it).
control "$root" numalab "$(shlibdeps "$root/usr/bin/numalab"), sensible-utils" utils \
    "measure what NUMA costs, find and fix memory and thread placement" \
    "numalab measures what NUMA costs on a machine (latency and bandwidth between every pair of nodes, the cost of a placement for a workload), runs commands under numactl's policies and reports where their memory really landed, advises a placement on evidence, reads the page cache per node (as fincore), and moves data between processes through a NUMA-placed shared-memory ring. It speaks numactl's policy spellings and writes JSON beside its tables."
build "$root" "numalab_${version}_${arch}.deb"

# libnumalab0 and libnumalab-dev: the C library, staged by scripts/c.sh.
stage="$work/c"
DESTDIR="$stage" LIBDIR="/usr/lib/$multiarch" bash scripts/c.sh --install /usr >/dev/null
lib="usr/lib/$multiarch"
root="$work/libnumalab0"
install -d "$root/$lib"
cp -a "$stage/$lib/libnumalab.so.$version" "$stage/$lib/libnumalab.so.$major" "$root/$lib/"
strip --remove-section=.comment --remove-section=.note "$root/$lib/libnumalab.so.$version"
docdir libnumalab0 "$root"
libdeps=$(shlibdeps "$root/$lib/libnumalab.so.$version")
control "$root" libnumalab0 "$libdeps" libs \
    "numalab's C library: NUMA placement, page location and ring" \
    "The C ABI of numalab: allocate memory under numactl-spelled policies, set a thread's policy and CPU binding, locate any address range's pages per node, read the machine's nodes and distances and a file's cached pages per node, and move data between processes through numalab's NUMA-placed shared-memory ring (interoperating with the numalab command and the Rust library)."
echo "libnumalab $major libnumalab0 (>= $version)" > "$root/DEBIAN/shlibs"
echo "activate-noawait ldconfig" > "$root/DEBIAN/triggers"
build "$root" "libnumalab0_${version}_${arch}.deb"

root="$work/libnumalab-dev"
install -d "$root/$lib/pkgconfig" "$root/usr/include"
cp -a "$stage/$lib/libnumalab.so" "$stage/$lib/libnumalab.a" "$root/$lib/"
strip --strip-debug --remove-section=.comment "$root/$lib/libnumalab.a"
install -m 0644 "$stage/$lib/pkgconfig/numalab.pc" "$root/$lib/pkgconfig/"
install -m 0644 "$stage/usr/include/numalab.h" "$root/usr/include/"
docdir libnumalab-dev "$root"
install -m 0644 docs/c.md "$root/usr/share/doc/libnumalab-dev/"
install -d "$root/usr/share/doc/libnumalab-dev/examples"
install -m 0644 examples/c/* "$root/usr/share/doc/libnumalab-dev/examples/"
control "$root" libnumalab-dev "libnumalab0 (= $version), libhwloc-dev, libudev-dev" libdevel \
    "numalab's C library: development files" \
    "numalab.h, numalab.pc for pkg-config, and libnumalab.so and libnumalab.a to link against, with docs/c.md and the C and C++ examples."
build "$root" "libnumalab-dev_${version}_${arch}.deb"

if [[ $wheel == 1 ]]; then
    bash scripts/python.sh --build >/dev/null
    cp "$target"/wheels/numalab-"$version"-*.whl "$out/"
    echo "package.sh: built $(basename "$out"/numalab-"$version"-*.whl)" >&2
fi

# Each package's files: what it must hold.
contents() { dpkg-deb -c "$out/$1" | awk '{print $6}' | sed 's|^\./|/|'; }
expect() {
    local deb=$1 path=$2
    contents "$deb" | grep -qx -- "$path" || { echo "package.sh: $deb lacks $path" >&2; exit 1; }
}
deb="numalab_${version}_${arch}.deb"
expect "$deb" /usr/bin/numalab
for page in "$work"/man/*.1; do expect "$deb" "/usr/share/man/man1/$(basename "$page").gz"; done
expect "$deb" /usr/share/bash-completion/completions/numalab
expect "$deb" /usr/share/zsh/vendor-completions/_numalab
expect "$deb" /usr/share/fish/vendor_completions.d/numalab.fish
for doc in README.md CHANGELOG.md changelog.gz copyright; do expect "$deb" "/usr/share/doc/numalab/$doc"; done
for guide in docs/*.md; do expect "$deb" "/usr/share/doc/numalab/$guide"; done
expect "libnumalab0_${version}_${arch}.deb" "/$lib/libnumalab.so.$version"
expect "libnumalab0_${version}_${arch}.deb" "/$lib/libnumalab.so.$major"
for file in "/$lib/libnumalab.so" "/$lib/libnumalab.a" "/$lib/pkgconfig/numalab.pc" /usr/include/numalab.h; do
    expect "libnumalab-dev_${version}_${arch}.deb" "$file"
done
echo "package.sh: every package holds its files; numalab depends on: $(dpkg-deb -f "$out/$deb" Depends)" >&2

# lintian: no error; warnings and notes shown.
report=$(lintian --display-level '>=warning' "$out"/*.deb 2>&1 | grep -v '^running with root privileges' || true)
[[ -n $report ]] && printf '%s\n' "$report" >&2
if grep -q '^E: ' <<<"$report"; then
    echo "package.sh: lintian found errors" >&2
    exit 1
fi
echo "package.sh: lintian: no errors ($(grep -c '^W: ' <<<"$report" || true) warnings); packages in $out" >&2
