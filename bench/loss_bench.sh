#!/usr/bin/env bash
# Events a second read without loss (issue #33): the same probed workload at rising call rates, under rprof probe
# with each engine (the mapped tracefs ring, perf events) and under bpftrace (which counts in the kernel and loses
# nothing), in one run. fixtures/rate_loop.c calls probed() RATE times a second (entry + return: 2 events a call)
# for BUDGET_MS of its own CPU time. For each rate and tool it prints the events a second attempted (as the
# target made them), the entries the tool saw, the events it says it lost, and its own CPU time (utime + stime of
# the tool's process, not the target's).
# Usage: bench/loss_bench.sh [BUDGET_MS] [RATES...]   (as root; defaults 1000 and 50000 100000 200000 400000
# 800000 0; rate 0 = as fast as the target can call)
# Env: NO_BUILD=1 uses target/release/rprof as it is; PAGES=N passes --mmap-pages N to rprof (default: rprof's default); BUSY=N runs N busy loops meanwhile.
# MODE=tracepoint (issue 41's item 8): the fixture makes getppid(2) calls at each rate instead (one
# raw_syscalls:sys_enter event a call), and `rprof probe --count t:raw_syscalls:sys_enter --by comm` and
# `bpftrace -e 'tracepoint:raw_syscalls:sys_enter { @[comm] = count(); }'` count them system-wide, as a user
# counts syscalls per process, each started before the fixture and stopped (SIGINT) after it; "entries" is the
# fixture's own row (its getppid calls and the clock readings of its pacing loop, also system calls: bpftrace's
# row is the reference), "lost" what rprof says it lost of every process's events (the kernel's count less what
# it read; lost% and cpu_ns/event are of the fixture's row and that), and the line ends with the load average
# over the last minute. bpftrace's CPU is its own process's: its BPF program runs in the kernel, charged to
# the traced tasks.
source "$(dirname "$0")/lib.sh"
BUDGET=${1:-1000}
shift || true
RATES=("$@")
[ ${#RATES[@]} -gt 0 ] || RATES=(50000 100000 200000 400000 800000 0)
command -v bpftrace >/dev/null || die "bpftrace is needed (apt-get install bpftrace)"
[ -n "${NO_BUILD:-}" ] || build_rprof
BIN=$WORK/rate_loop
gcc -O2 -o "$BIN" "$ROOT/fixtures/rate_loop.c"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
PAGES_ARG=()
[ -n "${PAGES:-}" ] && PAGES_ARG=(--mmap-pages "$PAGES")
BUSY_PIDS=()
cleanup() { for p in "${BUSY_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
for _ in $(seq 1 "${BUSY:-0}"); do
    (while :; do :; done) &
    BUSY_PIDS+=($!)
done

# The number after KEY (`calls 123`, `"lost":45`, `@c: 67`) in stdin.
num() { grep -o "$1[^0-9]*[0-9.]*" | head -1 | grep -o '[0-9.]*$'; }

# TOOL ARGS...: start the counting tool in the background, wait until it is counting (rprof says "Ctrl-C",
# bpftrace "Attaching"), run the fixture at $rate, stop the tool with SIGINT; prints the fixture's `calls N
# seconds S`, then the tool's output and its `cpu_s S`.
count_beside() {
    local err=$WORK/count.err
    with_cpu "$@" 2>"$err" &
    local wrapper=$!
    local i
    for i in $(seq 1 600); do grep -qE 'Ctrl-C|Attaching' "$err" 2>/dev/null && break; sleep 0.05; done
    "$BIN" "$rate" "$BUDGET" syscall
    pkill -INT -P "$wrapper" 2>/dev/null || true
    wait $wrapper
}

# The tracepoint mode: the same rates, the fixture's getppid(2) calls counted by comm.
tracepoint_mode() {
    local tool r entries lost calls secs cpu load
    for rate in "${RATES[@]}"; do
        for tool in rprof bpftrace; do
            case $tool in
            bpftrace)
                r=$(count_beside bpftrace -e 'tracepoint:raw_syscalls:sys_enter { @[comm] = count(); }')
                entries=$(echo "$r" | num '@\[rate_loop\]:')
                lost=0
                ;;
            rprof)
                r=$(count_beside "$RPROF" probe --count "${PAGES_ARG[@]}" --json --top 100000 --by comm \
                    t:raw_syscalls:sys_enter)
                entries=$(echo "$r" | grep -o '"count":[0-9]*,"function":"raw_syscalls:sys_enter","key":"rate_loop"' |
                    grep -o '[0-9]*' | head -1)
                lost=$(echo "$r" | num '"lost"')
                ;;
            esac
            calls=$(echo "$r" | num 'calls')
            secs=$(echo "$r" | num 'seconds')
            cpu=$(echo "$r" | grep -o 'cpu_s [0-9.]*$' | tail -1 | cut -d' ' -f2)
            load=$(cut -d' ' -f1 /proc/loadavg)
            awk -v rate="$rate" -v tool="$tool" -v c="$calls" -v s="$secs" -v e="${entries:-0}" -v l="${lost:-0}" \
                -v cpu="$cpu" -v load="$load" 'BEGIN { printf "%-8s %-8s %10.0f %10d %10d %10d %8.2f%% %8s %12.0f  load %s\n",
                rate, tool, c / s, c, e, l, 100 * l / (e + l), cpu, cpu * 1e9 / (e + l), load }'
        done
    done
}

printf '%-8s %-8s %10s %10s %10s %10s %9s %8s %12s\n' rate tool "events/s" calls entries lost lost% cpu_s "cpu_ns/event"
[ "${MODE:-}" = tracepoint ] && { tracepoint_mode; exit; }
for rate in "${RATES[@]}"; do
    for tool in tracefs perf bpftrace; do
        case $tool in
        bpftrace)
            r=$(with_cpu --strict bpftrace -e "uprobe:$BIN:probed { @c = count(); } uretprobe:$BIN:probed { @r = count(); }" \
                -c "$BIN $rate $BUDGET")
            entries=$(echo "$r" | num '@c:')
            lost=0
            ;;
        *)
            r=$(with_cpu --strict "$RPROF" probe --engine "$tool" "${PAGES_ARG[@]}" --json -x "$BIN" probed -- "$BIN" "$rate" "$BUDGET")
            entries=$(echo "$r" | num '"count"')
            lost=$(echo "$r" | num '"lost"')
            ;;
        esac
        calls=$(echo "$r" | num 'calls')
        secs=$(echo "$r" | num 'seconds')
        cpu=$(echo "$r" | num 'cpu_s')
        awk -v rate="$rate" -v tool="$tool" -v c="$calls" -v s="$secs" -v e="$entries" -v l="$lost" -v cpu="$cpu" \
            'BEGIN { ev = 2 * c; printf "%-8s %-8s %10.0f %10d %10d %10d %8.2f%% %8s %12.0f\n", rate, tool, ev / s,
                c, e, l, 100 * l / ev, cpu, cpu * 1e9 / (ev - l) }'
    done
done
