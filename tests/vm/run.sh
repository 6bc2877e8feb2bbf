#!/bin/bash
# Boot a stock Debian kernel (which has kprobes) under QEMU TCG with an initramfs holding a static rprof, the
# workloads and scenario.sh, and print the VM's serial console on stdout.
#
# Phases: host packages (apt-get, only if missing), kernel (apt-get download into target/vm-cache, reused),
# static rprof build (target/static), initramfs (busybox-static + cpio), boot and scenario.
# Prints `RPROF-VM-PHASE name=PHASE secs=S` lines for the timings; the scenario prints RPROF-VM-RESULT lines.
# Needs root (apt-get, mknod) and network to the Debian mirror when something is not cached yet.
# Usage: tests/vm/run.sh [build]
#   build: only build the static rprof (phase 3) and print `RPROF-VM-RPROF path=PATH`. The Rust test does this
#   first, then runs the other phases with RPROF_VM_RPROF=PATH.
# Env: RPROF_VM_CPU_RATIO, RPROF_VM_BOOT_CPU, RPROF_VM_IDLE (the VM's bounds: see qemu_watch), RPROF_VM_SMP
#      (vCPUs, default 2), RPROF_VM_RPROF (an rprof binary to use instead of building a static one; libraries are
#      copied if dynamic).
set -euo pipefail
shopt -s lastpipe

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VM=$ROOT/tests/vm
CACHE=$ROOT/target/vm-cache
SMP=${RPROF_VM_SMP:-2}

die() {
    echo "RPROF-VM-ERROR $*" >&2
    exit 1
}
now() { date +%s.%N; }
# phase NAME START [END]: print how long a phase took (END defaults to now).
phase() { echo "RPROF-VM-PHASE name=$1 secs=$(awk -v a="$2" -v b="${3:-$(now)}" 'BEGIN { printf "%.1f", b - a }')"; }

[ "$(id -u)" -eq 0 ] || die "tests/vm/run.sh needs root (apt-get install, mknod in the initramfs); run it as root"
mkdir -p "$CACHE"
# One run at a time per checkout: they share the cache and the initramfs directory.
exec 9> "$CACHE/.lock"
flock 9

# Phase 3, on its own: rprof built static, in its own target dir so the normal build is not invalidated.
# Unoptimized: the VM runs a few hundred probed calls, and a cold build at the dev profile's opt-level 1 takes twice
# as long. No debug info (the initramfs gets a stripped copy anyway): 51 s cold instead of 70 s here.
build_static() {
    (cd "$ROOT" && env -u CARGO_ENCODED_RUSTFLAGS -u CARGO_BUILD_RUSTFLAGS RUSTFLAGS='-C target-feature=+crt-static' \
        "${CARGO:-cargo}" build -q --config profile.dev.opt-level=0 --config profile.dev.debug=0 --bin rprof --target x86_64-unknown-linux-gnu \
        --target-dir target/static) ||
        die "static build of rprof failed (see the cargo output above)"
    RPROF=$ROOT/target/static/x86_64-unknown-linux-gnu/debug/rprof
    if readelf -lW "$RPROF" | grep -q INTERP; then
        die "$RPROF is dynamically linked: RUSTFLAGS='-C target-feature=+crt-static' did not reach the build"
    fi
}

if [ "${1:-}" = build ]; then
    t=$(now)
    build_static
    phase static_build "$t"
    echo "RPROF-VM-RPROF path=$RPROF"
    exit 0
fi

# cpu_of PID: the CPU seconds PID has used (user + system, all its threads).
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat" 2> /dev/null; }
# demand_of PID: the seconds PID's threads have run or waited in a run queue for a CPU (schedstat), summed.
demand_of() { cat "/proc/$1/task/"*/schedstat 2> /dev/null | awk '{ s += $1 + $2 } END { printf "%.3f", s / 1e9 }'; }

# qemu_watch PID: bound the VM by its own work, not by wall time, and kill qemu PID past a bound:
#  - CPU: qemu may use RPROF_VM_CPU_RATIO (default 35) times the CPU time it took to boot to /init (the same
#    kernel and initramfs every run: the boot calibrates this host's TCG speed, whatever the load), and
#    RPROF_VM_BOOT_CPU seconds (default 300) to boot;
#  - idle: qemu neither running nor waiting for a CPU (under 5% of each half second) for RPROF_VM_IDLE seconds
#    (default 60) in a row is a hung guest: the scenario never waits idle for more than its ~10 s of sleeps and
#    -d durations, and a loaded host makes qemu wait in a run queue, which counts as wanting the CPU.
# Prints `RPROF-VM-CPU boot=B total=T limit=L ratio=R` at the end (qemu's CPU seconds), or a RPROF-VM-WATCHDOG line.
qemu_watch() {
    local qpid=$1 ratio=${RPROF_VM_CPU_RATIO:-35} idle_max=${RPROF_VM_IDLE:-60}
    local limit=${RPROF_VM_BOOT_CPU:-300} boot="" cpu=0 c d last_d idle_from
    last_d=$(demand_of "$qpid") || true
    idle_from=$(now)
    while sleep 0.5; do
        c=$(cpu_of "$qpid") || true
        [ -n "$c" ] || break
        cpu=$c
        if [ -z "$boot" ] && grep -aq RPROF-VM-BOOTED "$CACHE/console.log"; then
            boot=$cpu
            limit=$(awk -v b="$boot" -v r="$ratio" 'BEGIN { printf "%.1f", b * r }')
        fi
        if awk -v c="$cpu" -v l="$limit" 'BEGIN { exit !(c > l) }'; then
            echo "RPROF-VM-WATCHDOG reason=cpu qemu used ${cpu}s of CPU, over its limit of ${limit}s (${ratio}x the ${boot:-?}s its boot took; the boot alone may take ${RPROF_VM_BOOT_CPU:-300}s)"
            kill "$qpid"
            return
        fi
        d=$(demand_of "$qpid") || true
        [ -n "$d" ] || break
        if awk -v d="$d" -v l="$last_d" 'BEGIN { exit !(d - l > 0.025) }'; then
            idle_from=$(now)
        elif awk -v a="$idle_from" -v b="$(now)" -v m="$idle_max" 'BEGIN { exit !(b - a > m) }'; then
            echo "RPROF-VM-WATCHDOG reason=idle qemu neither ran nor waited for a CPU for ${idle_max}s: the guest is hung (qemu CPU ${cpu}s)"
            kill "$qpid"
            return
        fi
        last_d=$d
    done
    echo "RPROF-VM-CPU boot=${boot:-none} total=$cpu limit=$limit ratio=$ratio"
}

APT_UPDATED=0
apt_update() {
    if [ "$APT_UPDATED" -eq 0 ]; then
        apt-get update -qq || die "apt-get update failed: check the network and /etc/apt/sources.list"
        APT_UPDATED=1
    fi
}

# Phase 1: host packages.
t=$(now)
need=()
command -v qemu-system-x86_64 > /dev/null || need+=(qemu-system-x86)
dpkg -s busybox-static > /dev/null 2>&1 || need+=(busybox-static)
command -v cpio > /dev/null || need+=(cpio)
[ -f /usr/sbin/vfscount.bt ] || need+=(bpftrace)
command -v gcc > /dev/null || need+=(gcc libc6-dev)
if [ ${#need[@]} -gt 0 ]; then
    apt_update
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 \
        "${need[@]}" > /dev/null || die "apt-get install ${need[*]} failed; install them by hand"
fi
phase host_packages "$t"

# Phase 2: the kernel, a stock Debian 6.1 cloud kernel (virtio, 8250 serial, tracefs, kprobes built in).
t=$(now)
# With it, the loop driver (a module there: the bt_bio* steps' block device), kept beside it.
VMLINUZ=$(ls "$CACHE"/vmlinuz-6.1.0-*-cloud-amd64 2> /dev/null | sort -V | tail -n 1 || true)
if [ -z "$VMLINUZ" ] || [ ! -f "$CACHE/loop-${VMLINUZ##*/vmlinuz-}.ko" ]; then
    rm -f "$CACHE"/vmlinuz-6.1.0-* "$CACHE"/loop-*.ko
    apt_update
    pkg=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-cloud-amd64-unsigned$' | cut -d' ' -f1 |
        sort -V | tail -n 1)
    [ -n "$pkg" ] || die "no linux-image-6.1.0-*-cloud-amd64-unsigned package in apt-cache search: check that the Debian bookworm (and bookworm-security) sources are configured"
    (cd "$CACHE" && apt-get download -q "$pkg" 2> /dev/null) ||
        die "apt-get download $pkg failed: the test needs network access to the Debian mirror"
    deb=$(ls "$CACHE"/"$pkg"_*.deb | head -n 1)
    dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$CACHE" --wildcards --strip-components=2 './boot/vmlinuz-*' ||
        die "could not extract boot/vmlinuz-* from $deb"
    VMLINUZ=$(ls "$CACHE"/vmlinuz-6.1.0-*-cloud-amd64 | sort -V | tail -n 1)
    dpkg-deb --fsys-tarfile "$deb" | tar -xO --wildcards './lib/modules/*/kernel/drivers/block/loop.ko' \
        > "$CACHE/loop-${VMLINUZ##*/vmlinuz-}.ko" || die "could not extract loop.ko from $deb"
    rm -f "$deb"
fi
echo "RPROF-VM-INFO kernel=$VMLINUZ"
phase kernel "$t"

# Phase 3: the static rprof (see build_static). RPROF_VM_RPROF=PATH puts that binary in the VM instead, without
# building (a dynamic one gets its libraries).
t=$(now)
if [ -n "${RPROF_VM_RPROF:-}" ]; then
    RPROF=$RPROF_VM_RPROF
    [ -f "$RPROF" ] || die "RPROF_VM_RPROF=$RPROF does not exist"
else
    build_static
fi
phase static_build "$t"

# Phase 4: the initramfs: busybox-static with its applet links, rprof, the workloads, /init and the scenario.
t=$(now)
IRD=$CACHE/initramfs
rm -rf "$IRD"
mkdir -p "$IRD"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp}
cp /bin/busybox "$IRD/bin/busybox"
for applet in $("$IRD/bin/busybox" --list-full); do
    [ -e "$IRD/$applet" ] || ln -s /bin/busybox "$IRD/$applet"
done
# rprof's own debug info is not needed in the VM and would only eat its 512 MiB.
objcopy --strip-debug "$RPROF" "$IRD/bin/rprof" 2> /dev/null || cp "$RPROF" "$IRD/bin/rprof"
if readelf -lW "$RPROF" 2> /dev/null | grep -q INTERP; then
    # A dynamic rprof: bring the loader and the libraries it needs, at the paths ldd gives.
    for lib in $(ldd "$RPROF" | grep -o '/[^ ]*'); do
        mkdir -p "$IRD$(dirname "$lib")"
        cp -L "$lib" "$IRD$lib"
    done
fi
gcc -static -O2 -Wall -o "$IRD/opener" "$VM/opener.c" || die "gcc -static failed for opener.c: install libc6-dev"
gcc -static -O2 -Wall -o "$IRD/burner" "$VM/burner.c" || die "gcc -static failed for burner.c: install libc6-dev"
gcc -static -O2 -Wall -o "$IRD/pager" "$VM/pager.c" || die "gcc -static failed for pager.c: install libc6-dev"
# The loop driver, and bpftrace's kprobe tools as Debian's bpftrace package ships them (run unchanged by rprof bt).
mkdir -p "$IRD/lib/modules" "$IRD/bt"
cp "$CACHE/loop-${VMLINUZ##*/vmlinuz-}.ko" "$IRD/lib/modules/loop.ko"
for tool in vfscount vfsstat capable biolatency biostacks swapin xfsdist; do
    cp "/usr/sbin/$tool.bt" "$IRD/bt/" || die "no /usr/sbin/$tool.bt: install Debian's bpftrace package"
done
cp "$VM/init" "$IRD/init"
cp "$VM/scenario.sh" "$IRD/scenario.sh"
chmod +x "$IRD/init"
mknod "$IRD/dev/console" c 5 1
(cd "$IRD" && find . | cpio -o -H newc --quiet) > "$CACHE/initramfs.cpio"
phase initramfs "$t"

# Phase 5: boot and scenario. The serial console is the VM's stdout (and $CACHE/console.log); /init powers off when
# the scenario is done. One host thread runs both vCPUs (thread=single): with multi-threaded TCG on a busy 2-core
# host, a starved vCPU thread once stalled the guest kernel (RCU stall, soft lockup of `sh` writing kprobe_events).
# No wall-clock limit: a loaded host gives qemu less CPU and the run takes longer, which is no failure. qemu_watch
# bounds what the guest does instead, as the host accounts it (see there).
t=$(now)
booted=""
: > "$CACHE/console.log"
set +e
qemu-system-x86_64 -accel tcg,thread=single -cpu max -smp "$SMP" -m 512 -nographic -no-reboot \
    -kernel "$VMLINUZ" -initrd "$CACHE/initramfs.cpio" -append 'console=ttyS0 quiet panic=-1' \
    < /dev/null > "$CACHE/console.log" 2>&1 &
qpid=$!
qemu_watch "$qpid" > "$CACHE/watch.log" &
wpid=$!
tail -n +1 -s 0.2 -f --pid="$qpid" "$CACHE/console.log" | while IFS= read -r line; do
    line=${line%$'\r'}
    echo "$line"
    # The line may start with the terminal escapes SeaBIOS leaves on the console.
    case $line in *RPROF-VM-BOOTED*) booted=$(now) ;; esac
done
wait "$qpid"
status=$?
wait "$wpid"
set -e
cat "$CACHE/watch.log"
[ -n "$booted" ] || die "the VM did not reach /init (qemu exit status $status); console log: $CACHE/console.log"
phase boot "$t" "$booted"
phase scenario "$booted"
if grep -q RPROF-VM-WATCHDOG "$CACHE/watch.log"; then
    die "$(grep RPROF-VM-WATCHDOG "$CACHE/watch.log"); console log: $CACHE/console.log"
fi
grep -q 'RPROF-VM-DONE' "$CACHE/console.log" || die "the scenario did not finish (qemu exit status $status)"
