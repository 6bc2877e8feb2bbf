#!/usr/bin/env bash
# The cost of `rprof bt` against bpftrace on the same workload, in one run (issue 42's cost bar): the program
# `tracepoint:raw_syscalls:sys_enter { @[comm] = count(); }` system-wide while fixtures/rate_loop.c makes
# getppid(2) calls at RATE a second (one sys_enter event a call) from THREADS threads (each paced at
# RATE/THREADS: one thread on a loaded host gets one CPU's share at most) for BUDGET_MS of its own CPU time (all
# its threads'). Each tool is
# started before the fixture and stopped with SIGINT after it. Per tool and program it prints the events a
# second the fixture made, its calls, the fixture's count in the tool's map (`@[rate_loop]`: its getppid calls
# and the clock readings of its pacing loop, also system calls; bpftrace's is the reference), the events rprof
# says it lost (its "warning: N events were lost", which it printed only from this commit on; bpftrace counts in the
# kernel and loses none), the tool's own
# CPU seconds (its process: utime + stime polled from /proc; bpftrace's BPF program runs in the kernel, charged
# to the traced tasks, which rprof's ring writes are too) and that CPU per event of the fixture's row, and per
# event of the whole map (`all_counted`: every process's sys_enter events, the host's others too).
# Then the same with predicates on another process (pid 1), whose events rprof never handles when the kernel
# rejects them: `/tid == 1/` (the event's common_pid: into the kernel's event filter) and `/pid == 1/` (the
# process id, which the event does not hold: the events are opened for pid 1's threads only, per-process
# events, and rprof tests pid again), each as a ratio of the unfiltered run's CPU.
# Usage: bench/bt_bench.sh [RATE] [BUDGET_MS] [THREADS]   (as root; defaults 400000, 2000 and 2)
# Env: NO_BUILD=1 uses target/release/rprof as it is (RPROF=PATH another binary); RPROF_BASE=PATH also runs
# that binary (an older build: `rprof-base` rows) right after rprof on each program, for before/after figures
# from one run.
source "$(dirname "$0")/lib.sh"
RATE=${1:-400000}
BUDGET=${2:-2000}
THREADS=${3:-2}
command -v bpftrace >/dev/null || die "bpftrace is needed (apt-get install bpftrace)"
[ -n "${NO_BUILD:-}" ] || build_rprof
BIN=$WORK/rate_loop
gcc -O2 -pthread -o "$BIN" "$ROOT/fixtures/rate_loop.c"
TOOLS_RUN=(rprof)
[ -n "${RPROF_BASE:-}" ] && { [ -x "$RPROF_BASE" ] || die "no $RPROF_BASE"; TOOLS_RUN+=(rprof-base); }
TOOLS_RUN+=(bpftrace)

# The number after KEY (`calls 123`, `@[rate_loop]: 45`) in stdin.
num() { { grep -o "$1[^0-9]*[0-9.]*" || true; } | head -1 | { grep -o "[0-9.]*$" || true; }; }

# TOOL PROGRAM: start the tool on PROGRAM in the background, wait until BEGIN has printed (probes attached),
# run the fixture, stop the tool with SIGINT. Prints the fixture's `calls N seconds S`, the tool's output and
# its `cpu_s S`; its stderr is in $WORK/with_cpu.err.
run_beside() {
    local tool=$1 program="BEGIN { printf(\"ready\\n\"); } $2"
    local out=$WORK/bt.out
    rm -f "$WORK/with_cpu.out"
    case $tool in
    rprof) with_cpu "$RPROF" bt -e "$program" >"$out" 2>"$WORK/bt.err" & ;;
    rprof-base) with_cpu "$RPROF_BASE" bt -e "$program" >"$out" 2>"$WORK/bt.err" & ;;
    bpftrace) with_cpu bpftrace -e "$program" >"$out" 2>"$WORK/bt.err" & ;;
    esac
    local wrapper=$!
    local i
    for i in $(seq 1 600); do grep -q ready "$WORK/with_cpu.out" 2>/dev/null && break; sleep 0.05; done
    "$BIN" "$RATE" "$BUDGET" syscall "$THREADS"
    pkill -INT -P "$wrapper" 2>/dev/null || true
    # bpftrace at times misses a SIGINT here (tests/common/tracer.rs): another after 10 s, then SIGTERM.
    for sig in INT TERM; do
        for i in $(seq 1 100); do pgrep -P "$wrapper" >/dev/null || break; sleep 0.1; done
        pkill -"$sig" -P "$wrapper" 2>/dev/null || true
    done
    wait $wrapper
    cat "$out"
}

printf '%-10s %-22s %10s %10s %10s %10s %8s %7s %12s %10s %10s\n' tool program "events/s" calls counted \
    all_counted lost cpu_s "cpu_ns/event" "ns/counted" "x_unfilt"
declare -A BASE
for what in all tid pid; do
    case $what in
    all) program='tracepoint:raw_syscalls:sys_enter { @[comm] = count(); }' ;;
    tid) program='tracepoint:raw_syscalls:sys_enter /tid == 1/ { @[comm] = count(); }' ;;
    pid) program='tracepoint:raw_syscalls:sys_enter /pid == 1/ { @[comm] = count(); }' ;;
    esac
    for tool in "${TOOLS_RUN[@]}"; do
        r=$(run_beside "$tool" "$program")
        counted=$(echo "$r" | num '@\[rate_loop\]:')
        # Every process's events the map counted (system-wide: the fixture's and the host's others).
        # (with_cpu puts ` cpu_s S` after the last line.)
        all=$(echo "$r" | sed 's/ cpu_s [0-9.]*$//' | awk '/^@\[.*\]: [0-9]+$/ { n += $NF } END { print n + 0 }')
        echo "$r" >"$WORK/bt-$tool-$what.out"
        # (with_cpu keeps the tool's stderr.)
        lost=$(num 'warning: ' <"$WORK/with_cpu.err")
        calls=$(echo "$r" | num 'calls')
        secs=$(echo "$r" | num 'seconds')
        cpu=$(echo "$r" | grep -o 'cpu_s [0-9.]*$' | tail -1 | cut -d' ' -f2)
        [ "$what" = all ] && BASE[$tool]=$cpu
        if [ "$what" = all ] && [ "$tool" = rprof ]; then
            BAR=$(awk -v c="$calls" -v s="$secs" -v e="${counted:-0}" -v l="${lost:-0}" 'BEGIN {
                made = c / s >= 400000 ? "" : sprintf(" the fixture made %.0f events/s;", c / s)
                kept = (l == 0 && e >= c) ? "" : sprintf(" %d lost, %d of %d counted;", l, e, c)
                printf "%s", (made kept == "" ? "met" : "not met:" made kept) }')
        fi
        label="@[comm]=count()"
        [ "$what" != all ] && label="/$what == 1/ count()"
        # Per event of the fixture's (the unfiltered run counts them; a filtered run sees none of them), and
        # per event the map counted (every process's; unfiltered runs only).
        awk -v tool="$tool" -v p="$label" -v c="$calls" -v s="$secs" -v e="${counted:-0}" -v l="${lost:-0}" \
            -v a="$all" -v cpu="$cpu" -v base="${BASE[$tool]}" 'BEGIN {
            printf "%-10s %-22s %10.0f %10d %10d %10d %8d %7.2f %12.0f %10s %10.2f\n", tool, p, c / s, c, e, a,
                l, cpu, cpu * 1e9 / c, (a > 0 ? sprintf("%.0f", cpu * 1e9 / a) : "-"), (base > 0 ? cpu / base : 0) }'
    done
done
echo "rprof, 400,000 events/s with nothing lost (issue 42's bar): ${BAR:-not run}"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
