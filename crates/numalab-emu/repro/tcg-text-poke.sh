#!/usr/bin/env bash
# A guest kernel crash under QEMU's multi-threaded TCG that has nothing to
# do with numalab: only busybox runs in the guest. Every CPU keeps
# switching tasks (so each is often in the scheduler) while one shell loop
# turns the sched_switch tracepoint on and off. Each turn patches a jump
# in __schedule with Linux's int3-based text_poke; with one host thread
# per vCPU (MTTCG) a vCPU sometimes still executes the int3 after the
# patch has completed, and the kernel dies with "Oops: int3" in
# __schedule (or, less often, the guest stops with no message). With one
# host thread for all vCPUs (-accel tcg,thread=single) it does not happen.
#
# numalab trips over the same race whenever the kernel flips a static key
# while other vCPUs are busy: perf events opened and closed (perf_sched_events,
# `numalab report`, `run`, `profile`), numa_balancing switched, ... The
# emulated-NUMA suite therefore boots its guests with thread=single.
#
#   crates/numalab-emu/repro/tcg-text-poke.sh [BOOTS] [KERNEL...]
#
# Needs qemu-system-x86_64, busybox (static) and cpio; run as root or with
# readable kernel images (Debian's are mode 0600). Prints one line per boot
# and a count per kernel and TCG mode.
set -euo pipefail
boots=${1:-5}
shift || true
kernels=("$@")
if ((${#kernels[@]} == 0)); then
    mapfile -t kernels < <(ls -v /boot/vmlinuz-* 2>/dev/null)
fi
((${#kernels[@]})) || { echo "no kernel image in /boot; give one" >&2; exit 2; }
busybox=$(command -v busybox || true)
[[ -n "$busybox" ]] || { echo "busybox not found: apt-get install busybox-static" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/root/bin" "$work/root/proc" "$work/root/sys" "$work/root/dev"
cp "$busybox" "$work/root/bin/busybox"
cat > "$work/root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tracefs tracefs /sys/kernel/tracing
key=/sys/kernel/tracing/events/sched/sched_switch/enable
n=$(grep -c ^processor /proc/cpuinfo)
i=0
while [ $i -lt $((n * 2)) ]; do (while :; do usleep 1; done) & i=$((i + 1)); done
i=0
end=$(($(cut -d. -f1 /proc/uptime) + 60))
while [ "$(cut -d. -f1 /proc/uptime)" -lt $end ]; do
    echo 1 > $key
    echo 0 > $key
    i=$((i + 1))
done
echo "REPRO: survived $i flips in 60 s"
poweroff -f
INIT
chmod 755 "$work/root/init"
(cd "$work/root" && find . -print0 | cpio --null -o -H newc 2>/dev/null) > "$work/initramfs.cpio"

for kernel in "${kernels[@]}"; do
    for accel in tcg tcg,thread=single; do
        survived=0 oops=0 hung=0
        for ((b = 1; b <= boots; b++)); do
            start=$SECONDS
            rc=0
            out=$(timeout 300 qemu-system-x86_64 -machine pc -accel "$accel" -cpu max -smp 4 -m 512M \
                -nodefaults -no-user-config -display none -no-reboot -serial stdio \
                -kernel "$kernel" -initrd "$work/initramfs.cpio" \
                -append "console=ttyS0 loglevel=4 panic=-1 oops=panic rdinit=/init" 2>&1) || rc=$?
            if grep -q "REPRO: survived" <<<"$out"; then
                outcome="$(grep -o 'survived [0-9]* flips in 60 s' <<<"$out")"; survived=$((survived + 1))
            elif grep -q "Oops" <<<"$out"; then
                outcome="$(grep -m1 -o 'Oops: [a-z0-9]*' <<<"$out") at $(grep -m1 -o 'RIP: 0010:[^ ]*' <<<"$out")"
                oops=$((oops + 1))
            else
                outcome="stopped (exit $rc, no Oops)"; hung=$((hung + 1))
            fi
            printf '%s  -accel %-18s boot %d: %s (%d s)\n' "$(basename "$kernel")" "$accel" "$b" "$outcome" $((SECONDS - start))
        done
        printf '%s  -accel %-18s %d of %d survived, %d Oops, %d stopped\n\n' \
            "$(basename "$kernel")" "$accel" "$survived" "$boots" "$oops" "$hung"
    done
done
