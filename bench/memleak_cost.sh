#!/usr/bin/env bash
# What `rprof tool memleak` costs the traced program, against bpftrace doing the same traps (uprobe and
# uretprobe on malloc with the user stack, uprobe on free, a map by address) on the same fixture, in one run:
# fixtures/malloc_loop.c's malloc+free calls per second of its own CPU time, bare and under each, and the ratios.
# Usage: bench/memleak_cost.sh [CPU_MS]   (RPROF=target/debug/rprof to skip the release build)
source "$(dirname "$0")/lib.sh"
build_rprof
command -v bpftrace >/dev/null || die "bpftrace is needed"
MS=${1:-1000}
gcc -O2 -I"$ROOT/fixtures" -o "$WORK/malloc_loop" "$ROOT/fixtures/malloc_loop.c"
LIBC=$(ldd "$WORK/malloc_loop" | awk '/libc.so/ { print $3 }')

# run_under NAME READY_TEXT COMMAND...: the fixture's calls per CPU second with COMMAND (given the fixture's pid
# as its last word) attached; an empty COMMAND runs it bare.
run_under() {
    local ready=$1; shift
    local out="$WORK/malloc_loop.out" log="$WORK/tracer.log"
    : >"$out"; : >"$log"
    "$WORK/malloc_loop" "$MS" >"$out" &
    local fx=$!
    until grep -q ready "$out"; do sleep 0.05; done
    local tracer=""
    if [ $# -gt 0 ]; then
        "$@" "$fx" >"$log" 2>&1 &
        tracer=$!
        for _ in $(seq 600); do grep -q "$ready" "$log" && break; sleep 0.1; done
    fi
    kill -USR1 "$fx"
    wait "$fx" || true
    if [ -n "$tracer" ]; then kill -INT "$tracer" 2>/dev/null || true; wait "$tracer" || true; fi
    awk '/calls_per_cpu_s/ { print $2 }' "$out"
}

bt_memleak() {
    local pid=$1
    bpftrace -p "$pid" -e "
uprobe:$LIBC:malloc { @size[tid] = arg0; @stack[tid] = ustack; }
uretprobe:$LIBC:malloc /@size[tid]/ { @addr[retval] = @size[tid]; @where[retval] = @stack[tid]; delete(@size[tid]); delete(@stack[tid]); }
uprobe:$LIBC:free { delete(@addr[arg0]); delete(@where[arg0]); }
END { clear(@addr); clear(@where); clear(@size); clear(@stack); }"
}
rprof_memleak() { "$RPROF" tool memleak 60 -p "$1"; }

bare=$(run_under "")
ours=$(run_under "Attaching to pid" rprof_memleak)
theirs=$(run_under "Attaching" bt_memleak)
echo "malloc+free calls per CPU second of the fixture ($MS ms of CPU each):"
echo "  bare:                $bare"
echo "  rprof tool memleak:  $ours   (slowdown $(ratio "$bare" "$ours")x)"
echo "  bpftrace, same traps: $theirs   (slowdown $(ratio "$bare" "$theirs")x)"
echo "  rprof / bpftrace rate: $(ratio "$ours" "$theirs")"
