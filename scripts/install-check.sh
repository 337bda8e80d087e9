#!/usr/bin/env bash
# Installs the packages scripts/package.sh built on a fresh Debian or
# Ubuntu machine (or container) with no Rust, and checks what a user
# does first, as root and as an unprivileged user: numalab report
# --quick, man numalab-exec, numalab fincore /etc, bash completion, and a
# C program built against the installed libnumalab. Run it as root from
# the directory holding the .deb files:
#   bash install-check.sh
# Exits non-zero at the first thing that does not work.
set -euo pipefail
fail() { echo "install-check: FAILED: $*" >&2; exit 1; }
step() { printf '\n== %s\n' "$*"; }
[[ $(id -u) == 0 ]] || fail "run as root (it installs packages and adds a user)"
compgen -G './numalab_*_amd64.deb' >/dev/null || fail "no numalab_*_amd64.deb in $PWD"

step "apt-get install ./numalab_*.deb (and man-db, to read its pages)"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ./numalab_*_amd64.deb man-db >/dev/null
dpkg-query -W -f='${Package} ${Version}: ${Installed-Size} KiB installed, depends on ${Depends}\n' numalab
echo "$(command -v numalab): $(numalab --version); cargo: $(command -v cargo || echo none)"

check_as() {
    local who=$1
    local run=(bash -c)
    [[ $who == root ]] || run=(runuser -u "$who" -- bash -c)
    step "as $who: numalab report --quick"
    "${run[@]}" 'cd && numalab report --quick > report.txt' || fail "numalab report --quick as $who"
    "${run[@]}" 'cd && grep -q "NUMA node" report.txt' || fail "the report as $who names no NUMA node"
    "${run[@]}" 'cd && head -8 report.txt'
    step "as $who: man numalab-exec"
    local page
    page=$("${run[@]}" 'MANWIDTH=80 man --warnings numalab-exec 2>&1 | col -b')
    grep -q "^EXIT STATUS" <<<"$page" || fail "man numalab-exec as $who: $page"
    head -6 <<<"$page"
    step "as $who: numalab fincore /etc"
    # As util-linux fincore: 1 when a file could not be read (as a user,
    # some of /etc cannot), the others still counted.
    local status=0 out
    out=$("${run[@]}" 'numalab fincore /etc 2>/dev/null') || status=$?
    [[ $status == 0 || ($status == 1 && $who != root) ]] || fail "numalab fincore /etc as $who exited $status"
    grep -q "/etc/passwd" <<<"$out" || fail "numalab fincore /etc as $who does not count /etc/passwd"
    head -4 <<<"$out"
    step "as $who: bash completes 'numalab ex' and 'numalab exec --mem'"
    local completed
    completed=$("${run[@]}" 'source /usr/share/bash-completion/completions/numalab
        COMP_WORDS=(numalab ex); COMP_CWORD=1; _numalab numalab ex numalab; echo "${COMPREPLY[@]}"
        COMP_WORDS=(numalab exec --mem); COMP_CWORD=2; _numalab numalab --mem exec; echo "${COMPREPLY[@]}"')
    [[ $completed == $'exec\n--membind' ]] || fail "bash completion as $who gave: $completed"
    echo "$completed" | paste -sd' '
}
check_as root
id user >/dev/null 2>&1 || useradd -m user
check_as user

if compgen -G './libnumalab-dev_*_amd64.deb' >/dev/null; then
    step "the C library: apt-get install ./libnumalab0_*.deb ./libnumalab-dev_*.deb, a C program built with pkg-config"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        ./libnumalab0_*_amd64.deb ./libnumalab-dev_*_amd64.deb gcc libc6-dev pkg-config >/dev/null
    build=$(mktemp -d)
    chmod 0755 "$build"
    cc /usr/share/doc/libnumalab-dev/examples/place.c $(pkg-config --cflags --libs numalab) -o "$build/place"
    runuser -u user -- "$build/place" || fail "the C example, linked against the installed libnumalab"
    rm -rf "$build"
fi
step "installed"
dpkg-query -W -f='${Package} ${Version} ${Installed-Size} KiB\n' 'numalab*' 'libnumalab*' 2>/dev/null
